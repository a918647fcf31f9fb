"""Running one function on many processes (spawned, under torchrun or srun, or in-process): ``launch`` starts
them and ends the whole job with one line when a rank fails, as ``signals`` does on SIGTERM or Ctrl-C; ``topology``
says where they run, ``rendezvous`` makes those started separately meet; ``process_setup`` and ``ranks`` serve each."""
