"""Running one function on many processes: spawned, under torchrun or srun, or in-process.

``launch`` runs ``fn(local_rank, arg)`` on every worker; ``topology`` (how many processes, where they meet),
``devices``, ``slurm`` and ``torchrun`` say how; ``rendezvous`` makes separately started processes meet;
``signals`` and ``failures`` end the whole job, on every node, with one line on SIGTERM, Ctrl-C or a failed rank;
``process_setup`` holds per-process settings; ``ranks`` holds ``rank_zero_only`` and the typed collectives.
"""
