"""A traced gloo rank that dies by a signal while recording.

Modes:
  stream N  all-reduce forever, printing "k t_ns" (seq, CLOCK_MONOTONIC) after each one
            completes; the test kills the rank with SIGKILL once k >= N
  abort N   N all-reduces, then os.abort() (SIGABRT) 20 ms later
  hang N    N all-reduces on both ranks; then rank 1 enters one more that rank 0 never
            joins, and std::terminate() ends it 100 ms later (as a backend's watchdog
            does); rank 0 waits for stdin to close
"""

import ctypes
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import syncpace


def terminate_later(delay_s: float) -> None:
    def run() -> None:
        time.sleep(delay_s)
        ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()

    threading.Thread(target=run, daemon=True).start()


def main() -> None:
    mode, count = sys.argv[1], int(sys.argv[2])
    syncpace.attach(os.environ["TRACE_DIR"], flush_interval_s=float(os.environ["FLUSH_S"]))
    dist.init_process_group("gloo")
    x = torch.ones(16)
    if mode == "stream":
        k = 0
        while True:
            dist.all_reduce(x)
            print(k, time.monotonic_ns(), flush=True)
            k += 1
            time.sleep(0.001)  # the step's compute
    for _ in range(count):
        dist.all_reduce(x)
    print(f"ISSUED {count}", flush=True)
    if mode == "abort":
        time.sleep(0.02)
        os.abort()
    if mode == "hang":
        if dist.get_rank() == 1:
            terminate_later(0.1)
            dist.all_reduce(x)  # rank 0 never joins: std::terminate ends this rank
        sys.stdin.read()  # rank 0: until the test kills it
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
