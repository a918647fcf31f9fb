"""Running one function on many processes: spawned, under torchrun or srun, or in-process.

* ``launch``: ``launch(fn, arg, spec)`` runs ``fn(local_rank, arg)`` on every worker through
  ``idist.Parallel``;
* ``topology``: ``LaunchSpec`` (how many processes, where the rendezvous is) and what torchrun or
  srun already decided for this process;
* ``devices``: ``--device``, and no more processes on a node than its GPUs (checked before spawning);
* ``slurm``: what ``srun`` tells a task;
* ``torchrun``: whether torchrun started this process, and its restarts' shared store;
* ``signals``: SIGTERM and Ctrl-C stop the whole job;
* ``failures``: a failed worker becomes one ``error: rank N failed on HOST: ...`` line;
* ``failure_board``: that line reaches every rank of the job through its store, and ends them;
* ``process_setup``: per-process settings every launcher and worker applies;
* ``ranks``: ``rank_zero_only``, the one place rank-0-only work is decided, and the collectives'
  typed forms.
"""
