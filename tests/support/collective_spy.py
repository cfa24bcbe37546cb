"""NCCL's rules, enforced on a CPU-only machine.

On a GPU node the trainer's default process group is NCCL, which takes only tensors on the rank's
own GPU (`torch.distributed` raises "No backend type associated with device type cpu" otherwise),
while its gloo control group takes only CPU tensors. On CPU both are gloo, so a CPU test never sees
a tensor on the wrong device. `emulated_nccl` stands the meta device in for the GPU: the code under
test is given `torch.device("meta")` as its training device, and every collective checks each
tensor's device against its group, records the call and returns without communicating (one rank
stands for all). Reading a meta tensor's value gives 1, and counts as a host read: on a GPU each
one waits for the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

TRAINING_DEVICE = torch.device("meta")  # the stand-in for cuda:<local rank>
_TENSOR_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor")


@dataclass
class Spy:
    world_size: int
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (collective, group, device)
    host_reads: int = 0  # values read back from the training device (.item(), bool(), .tolist())


def _group_name(group) -> str:
    return "default" if group is None or group is dist.group.WORLD else "control"


def _checked(name: str, spy: Spy):
    def collective(tensor, *args, group=None, **kwargs):
        kind = _group_name(group)
        wanted = TRAINING_DEVICE if kind == "default" else torch.device("cpu")
        spy.calls.append((name, kind, str(tensor.device)))
        if tensor.device.type != wanted.type:
            raise RuntimeError(
                f"{name} on the {kind} group ({'NCCL' if kind == 'default' else 'gloo'}) got a tensor on "
                f"{tensor.device}: No backend type associated with device type {tensor.device.type}"
            )

    return collective


@contextlib.contextmanager
def emulated_nccl(monkeypatch, world_size: int = 2) -> Iterator[Spy]:
    spy = Spy(world_size)
    for name in _TENSOR_COLLECTIVES:
        monkeypatch.setattr(dist, name, _checked(name, spy))
    monkeypatch.setattr(
        dist, "barrier", lambda group=None, **kw: spy.calls.append(("barrier", _group_name(group), ""))
    )
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: world_size)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    item, as_bool, tolist = torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.tolist

    def read(real, meta_value):
        def value(t: torch.Tensor):
            if not t.is_meta:
                return real(t)
            spy.host_reads += 1
            return meta_value(t)

        return value

    monkeypatch.setattr(torch.Tensor, "item", read(item, lambda t: 1))
    monkeypatch.setattr(torch.Tensor, "__bool__", read(as_bool, lambda t: True))
    monkeypatch.setattr(
        torch.Tensor, "tolist", read(tolist, lambda t: torch.ones(t.shape, dtype=t.dtype).tolist())
    )
    yield spy
