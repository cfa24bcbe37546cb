"""Readers of what the health gate's programs print, each to one verdict: pass, warn or fail, and for
a failure the severity a node needs (least to most: MONITOR, RESET, REBOOT, ISOLATE).

    nvidia-smi -q -x        GPU inventory, remapped rows, uncorrectable ECC, throttling
    kernel log (/dev/kmsg)  NVRM Xid lines
    fi_info -p efa          the EFA devices libfabric sees
    nvidia-smi topo -m      NVLink between every pair of GPUs
    dcgmi diag -j           DCGM's diagnostics (its 4.x JSON)
    all_reduce_perf         nccl-tests' all-reduce: bus bandwidth and wrong results

Standard library only: the parsers run in the burn-in's containers and in the tests on recorded
outputs alike.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

SEVERITY_ORDER = ("MONITOR", "RESET", "REBOOT", "ISOLATE")
# NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket (Immediate Action)") for
# the codes an Ampere, Hopper or Blackwell training node reports, mapped onto what a cloud node can
# do: RESTART_APP and IGNORE are MONITOR (the job restarts, the node stays), RESET_GPU is RESET,
# RESTART_BM is REBOOT, CONTACT_SUPPORT (a part to replace) is ISOLATE. On EC2 every fatal one ends
# the same way, the instance replaced; the severity tells a person what the hardware did.
XID_SEVERITY = {
    8: "MONITOR",
    13: "MONITOR",
    31: "MONITOR",
    43: "MONITOR",
    45: "MONITOR",
    48: "RESET",
    61: "RESET",
    62: "RESET",
    63: "RESET",
    64: "ISOLATE",
    69: "RESET",
    74: "RESET",
    79: "REBOOT",
    92: "MONITOR",
    94: "MONITOR",
    95: "RESET",
    109: "RESET",
    119: "RESET",
    120: "RESET",
    121: "MONITOR",
    140: "RESET",
    154: "REBOOT",
}


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # pass | warn | fail
    detail: str
    severity: str = "MONITOR"  # what a failure needs; MONITOR for pass and warn
    figures: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"


def passed(name: str, detail: str, **figures) -> Check:
    return Check(name, "pass", detail, figures=figures)


def warned(name: str, detail: str, **figures) -> Check:
    return Check(name, "warn", detail, figures=figures)


def failed(name: str, detail: str, severity: str, **figures) -> Check:
    return Check(name, "fail", detail, severity, figures)


def worst(severities: list[str]) -> str:
    return max(severities, key=SEVERITY_ORDER.index, default="MONITOR")


def as_json(checks: list[Check]) -> str:
    return json.dumps([asdict(c) for c in checks], separators=(",", ":"))


# nvidia-smi -q -x ------------------------------------------------------------------------------


def _text(gpu: ET.Element, path: str) -> str:
    found = gpu.find(path)
    return (found.text or "").strip() if found is not None else ""


def _count(text: str) -> int:
    return int(text) if text.isdigit() else 0


def gpu_inventory(xml_text: str, expected: int) -> Check:
    """The GPUs the driver sees against the instance's count, and any GPU whose memory already
    failed: a row remapping failure (the part is bad), a remapping pending (a reset applies it) or
    uncorrectable ECC errors since the driver loaded."""
    root = ET.fromstring(xml_text)
    gpus = root.findall("gpu")
    if len(gpus) != expected:
        return failed(
            "gpu-inventory",
            f"{len(gpus)} GPUs seen by the driver, {expected} expected (a GPU off the bus or not initialised)",
            "REBOOT",
            gpus=len(gpus),
        )
    faults: list[tuple[str, str]] = []
    slow: list[str] = []
    for gpu in gpus:
        where = gpu.get("id", "?")
        if _text(gpu, "remapped_rows/remapped_row_failure") == "Yes":
            faults.append(("ISOLATE", f"{where}: row remapping failed"))
        elif _text(gpu, "remapped_rows/remapped_row_pending") == "Yes":
            faults.append(("RESET", f"{where}: row remapping pending"))
        uncorrectable = _count(_text(gpu, "ecc_errors/volatile/dram_uncorrectable")) + _count(
            _text(gpu, "ecc_errors/volatile/sram_uncorrectable")
        )
        if uncorrectable:
            faults.append(("RESET", f"{where}: {uncorrectable} uncorrectable ECC error(s) since boot"))
        reasons = gpu.find("clocks_event_reasons")
        reasons = gpu.find("clocks_throttle_reasons") if reasons is None else reasons
        if reasons is not None:
            active = [
                e.tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
                for e in reasons
                if (e.text or "").strip() == "Active" and "hw" in e.tag
            ]
            if active:
                slow.append(f"{where}: {', '.join(active)}")
    if faults:
        return failed(
            "gpu-inventory", "; ".join(d for _, d in faults), worst([s for s, _ in faults]), gpus=len(gpus)
        )
    if slow:
        return warned("gpu-inventory", f"hardware clock slowdown active: {'; '.join(slow)}", gpus=len(gpus))
    return passed("gpu-inventory", f"{len(gpus)} GPUs, no memory faults", gpus=len(gpus))


# kernel log -------------------------------------------------------------------------------------

# NVRM: Xid (PCI:0000:10:1c): 79, pid=..., GPU has fallen off the bus.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")


def xids(log: str) -> list[tuple[str, int, str]]:
    """(PCI address, code, the driver's words) of every Xid line."""
    return [(m[1].lower(), int(m[2]), m[3].strip()) for m in _XID.finditer(log)]


def xid_scan(log: str) -> Check:
    """Any Xid the table calls fatal fails the node; the others are named, not held against it."""
    found = xids(log)
    if not found:
        return passed("xid", "no Xid in the kernel log")
    judged = [(XID_SEVERITY.get(code, "MONITOR"), pci, code, text) for pci, code, text in found]
    named = "; ".join(f"Xid {code} on {pci} ({text or 'no text'})" for _, pci, code, text in judged)
    fatal = [s for s, *_ in judged if s != "MONITOR"]
    codes = sorted({code for *_, code, _ in judged})
    if fatal:
        return failed("xid", named, worst(fatal), codes=codes)
    return warned("xid", named, codes=codes)


# fi_info -p efa ---------------------------------------------------------------------------------

_DOMAIN = re.compile(r"^\s*domain:\s*(\S+)", re.MULTILINE)


def efa_devices(fi_info: str, expected: int) -> Check:
    """libfabric lists each EFA device once per endpoint type: its RDM domains (`<device>-rdm`) are
    the devices NCCL's plugin uses."""
    domains = {d for d in _DOMAIN.findall(fi_info) if d.endswith("-rdm")}
    if len(domains) != expected:
        return failed(
            "efa",
            f"{len(domains)} EFA devices seen by libfabric, {expected} expected for the instance type "
            "(an interface not attached, or the EFA device plugin gave the pod fewer)",
            "REBOOT",
            devices=len(domains),
        )
    return passed("efa", f"{len(domains)} EFA devices", devices=len(domains))


# nvidia-smi topo -m -----------------------------------------------------------------------------


def nvlink_topology(matrix: str, gpus: int) -> Check:
    """Every pair of GPUs joined by NVLink (NV<links>); a PCIe path (PIX, PXB, PHB, NODE, SYS)
    between two of them means a link is down and all-reduce runs at a fraction of its speed."""
    rows = {}
    header: list[str] = []
    for line in matrix.splitlines():
        cells = line.split()
        if cells and cells[0] == "GPU0" and not header:
            header = [c for c in cells if re.fullmatch(r"GPU\d+", c)]
            continue
        if header and cells and re.fullmatch(r"GPU\d+", cells[0]):
            rows[cells[0]] = cells[1 : 1 + len(header)]
    if len(header) != gpus or len(rows) != gpus:
        return failed("nvlink", f"the topology shows {len(rows)} GPUs, {gpus} expected", "REBOOT")
    missing = [
        f"{a}-{b} {cell}"
        for a, cells in rows.items()
        for b, cell in zip(header, cells, strict=True)
        if a < b and not cell.startswith("NV")
    ]
    if missing:
        return failed("nvlink", f"GPU pairs without NVLink: {', '.join(missing)}", "RESET")
    return passed("nvlink", f"NVLink between all {gpus} GPUs")


# dcgmi diag -j ----------------------------------------------------------------------------------

# A Deployment-category "failure" that is the node's setting, not its hardware: the AMI's
# persistence daemon not yet running. Others drain fleets over it; here it warns.
_CONFIG_ONLY = re.compile(r"persistence mode", re.IGNORECASE)
# Which test names what when it fails: a memory test, the HBM; PCIe, the bus.
_DCGM_SEVERITY = {"memory": "ISOLATE", "pcie": "REBOOT"}


def _messages(result: dict) -> list[str]:
    return [w.get("warning", "") for w in result.get("warnings") or [] if isinstance(w, dict)]


def dcgm_diagnostics(output: str, level: int) -> Check:
    """DCGM 4's JSON (`{"DCGM Diagnostic": {"test_categories": [...]}}`): any hardware, integration
    or stress test that failed fails the node; a run in which DCGM tested no hardware at all (its
    plugins skipped on an unlisted SKU) does not pass silently."""
    try:
        document = json.loads(output)
        categories = document["DCGM Diagnostic"]["test_categories"]
    except (ValueError, KeyError, TypeError):
        # The node's host engine never answered, or the run broke: the node is not proven.
        return failed("dcgm", f"dcgmi diag gave no diagnostic document: {output.strip()[:300]!r}", "RESET")
    fails: list[tuple[str, str]] = []
    warns: list[str] = []
    ran = 0
    for category in categories:
        hardware = category.get("category") != "Deployment"
        for test in category.get("tests") or []:
            name = test.get("name", "?")
            for result in test.get("results") or []:
                status = result.get("status", "")
                where = f"{name}" + (f" GPU {result['entity_id']}" if "entity_id" in result else "")
                said = [m for m in _messages(result) if m]
                words = "; ".join(said) or status
                if hardware and status in ("Pass", "Fail", "Warn"):
                    ran += 1
                # A setting's failure only where every message says so: none is no excuse.
                if status == "Fail" and not hardware and said and all(_CONFIG_ONLY.search(m) for m in said):
                    warns.append(f"{where}: {words}")
                elif status == "Fail":
                    fails.append((_DCGM_SEVERITY.get(name.lower(), "RESET"), f"{where}: {words}"))
                elif status == "Warn":
                    warns.append(f"{where}: {words}")
    if fails:
        return failed("dcgm", "; ".join(d for _, d in fails), worst([s for s, _ in fails]), level=level)
    if level > 1 and not ran:
        return warned("dcgm", f"DCGM level {level} ran no hardware test (its plugins skipped)", level=level)
    if warns:
        return warned("dcgm", "; ".join(warns), level=level, tests=ran)
    return passed("dcgm", f"level {level}: {ran} hardware results passed", level=level, tests=ran)


# all_reduce_perf (nccl-tests) ------------------------------------------------------------------

# A result row: size count type redop root, then time algbw busbw #wrong out of place and in place
# (nccl-tests src/util.cu writeBenchmarkLinePreamble and writeBenchmarkLineBody).
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+\w+\s+-?\d+((?:\s+\S+){8})\s*$", re.MULTILINE)


def all_reduce(output: str, floor_gbps: float | None) -> Check:
    """The largest message's bus bandwidth (the better of out of place and in place) against the
    floor; any wrong element is data the GPUs corrupted, whatever the speed."""
    rows = [(int(m[1]), m[3].split()) for m in _ROW.finditer(output)]
    if not rows:
        said = [line for line in output.splitlines() if "failure" in line.lower() or "error" in line.lower()]
        return failed(
            "nccl", f"all_reduce_perf gave no result: {'; '.join(said)[:300] or 'no output'}", "RESET"
        )
    size, cells = max(rows)
    wrong = sum(int(float(cells[i])) for i in (3, 7) if cells[i] != "N/A")
    busbw = max(float(cells[2]), float(cells[6]))
    figures = {"busGbps": busbw, "bytes": size}
    if wrong:
        return failed(
            "nccl",
            f"{wrong} wrong element(s) in a {size}-byte all-reduce: the GPUs corrupt data",
            "ISOLATE",
            **figures,
        )
    if floor_gbps and busbw < floor_gbps:
        return failed(
            "nccl",
            f"all-reduce bus bandwidth {busbw:g} GB/s at {size} bytes is below the group's floor of {floor_gbps:g} GB/s",
            "RESET",
            **figures,
        )
    return passed("nccl", f"{busbw:g} GB/s bus bandwidth at {size} bytes", **figures)
