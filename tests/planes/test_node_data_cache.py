"""A job's dataset cache on the node's disk where the stack owns the nodes (components/jobs/pods.py
NODE_DATA_CACHE): the job's next pod on the node, a gang's restart, starts without the download.
Not on a cluster the stack did not create, whose Pod Security may refuse host paths."""

from __future__ import annotations

from support.manifests import worker_pod
from support.plans import EXISTING_CLUSTER, plan
from trainer.flags import train_parser

from components.jobs.pods import DATA_CACHE_DIR, NODE_DATA_CACHE
from offline.plan import manifest_of
from offline.scheduling import JOB_TYPES, referenced_objects


def jobs_of(run) -> list[dict]:
    return [manifest_of(r)[1] for t in JOB_TYPES for r in run.by_type(t)]


def data_cache(pod: dict) -> tuple[dict | None, dict | None]:
    volume = next((v for v in pod["volumes"] if v["name"] == "data-cache"), None)
    (container,) = pod["containers"]
    mount = next((m for m in container["volumeMounts"] if m["name"] == "data-cache"), None)
    return volume, mount


def test_on_the_stacks_own_cluster_the_trainers_data_cache_is_the_nodes(prod_plan):
    jobs = jobs_of(prod_plan)
    assert {m["kind"] for m in jobs} >= {"TrainJob", "RayJob"}
    for manifest in jobs:
        volume, mount = data_cache(worker_pod(manifest, referenced_objects(prod_plan)))
        assert volume == {
            "name": "data-cache",
            "hostPath": {"path": NODE_DATA_CACHE, "type": "DirectoryOrCreate"},
        }
        assert mount == {"name": "data-cache", "mountPath": DATA_CACHE_DIR}


def test_the_mount_is_where_the_trainer_caches_by_default():
    assert str(train_parser({}).get_default("data_cache")) == DATA_CACHE_DIR


def test_not_on_a_cluster_the_stack_did_not_create():
    run = plan("existing", facts=EXISTING_CLUSTER)
    jobs = jobs_of(run)
    assert jobs
    for manifest in jobs:
        assert data_cache(worker_pod(manifest, referenced_objects(run))) == (None, None)
