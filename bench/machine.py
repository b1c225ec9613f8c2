"""Probes of the machine and of this process: what it runs on, its load, its memory (Linux)."""
from __future__ import annotations

import os
import platform
import resource

import torch


def machine() -> dict:
    """The machine's description, saved with the results and printed above the tables."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {"cpu": _cpu(), "cores": cores, "mem_gib": _mem_gib(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "os": platform.platform(), "loadavg_start": loadavg()}


def _cpu() -> str:
    cpu = platform.processor() or platform.machine()
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                                   # the first CPU is enough
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        return cpu
    cpu = info.get("model name", cpu)
    if "cpu family" in info and "model" in info:
        cpu += f" (family {info['cpu family']} model {info['model']})"
    if "hypervisor" in info.get("flags", "").split():
        cpu += ", virtual machine"
    return cpu


def _mem_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def vmrss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """Peak RSS of this process: VmHWM of /proc/self/status. Not ru_maxrss: Linux carries
    ru_maxrss over fork and execve, so a child started by a big parent (this benchmark, after
    its timing section) reports the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux
