"""`existingCluster.checkpointHostPath` is mounted read-write into every job pod from every node:
a system path (/, /etc, the kubelet's state) is refused with its key, before anything is planned."""

from __future__ import annotations

import pytest
from support.manifests import worker_pod
from support.plans import plan

from config.schema import ConfigError
from offline.plan import manifest_of
from offline.scheduling import referenced_objects

KEY = "trainstack:existingCluster.checkpointHostPath"
ALLOWED = "a directory below /var/local, /srv, /mnt, /data (/var/local/trainstack, say), without .."


def existing(path: str) -> dict:
    return {
        "kubeconfig": "~/.kube/config",
        "context": "kind-trainstack",
        "kindClusterName": "trainstack",
        "checkpointHostPath": path,
        "systemNodes": {"nodeSelector": {"kubernetes.io/os": "linux"}, "cpus": 4, "memoryGiB": 8, "count": 2},
    }


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/etc",
        "/var/lib/kubelet",
        "/var/lib/kubelet/pods",
        "/run/containerd",
        "/var/local",
        "/var/local/../../etc",
    ],
)
def test_a_system_path_is_refused_naming_the_key_the_value_and_what_is_allowed(path):
    with pytest.raises(ConfigError) as err:
        plan("local", existingCluster=existing(path))
    assert [str(p) for p in err.value.problems] == [
        f'{KEY} = "{path}": job pods would write there on every node; not a directory of its own for data; '
        f"allowed: {ALLOWED}"
    ]


def test_a_relative_path_is_still_refused_as_such():
    with pytest.raises(ConfigError) as err:
        plan("local", existingCluster=existing("checkpoints"))
    assert [str(p) for p in err.value.problems] == [
        f'{KEY} = "checkpoints": not an absolute path; allowed: /var/local/trainstack, say'
    ]


@pytest.mark.parametrize(
    "path", ["/var/local/trainstack", "/srv/ckpt/", "/mnt/nvme0/trainstack", "/data/ckpt"]
)
def test_a_data_directory_is_accepted_and_each_job_gets_its_own_under_it(path):
    """The local template's TrainJob: its group's runtime mounts the directory, the job its own
    directory in it (the mount's sub-path, which the kubelet creates)."""
    run = plan("local", existingCluster=existing(path))
    job = manifest_of(run.one("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob", "job-tiny-fsdp"))[1]
    pod = worker_pod(job, referenced_objects(run))
    (volume,) = [v for v in pod["volumes"] if "hostPath" in v]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert f"{volume['hostPath']['path']}/{mount['subPath']}" == f"{path.rstrip('/')}/tiny-fsdp"
