"""Running one function on many processes (spawned, under torchrun or srun, or in-process): ``launch`` starts
them, ``topology`` says where, ``rendezvous`` makes separately started ones meet, ``signals`` and ``failures`` end
the whole job with one line; ``process_setup`` (device, threads) and ``ranks`` (rank 0, collectives) serve each."""
