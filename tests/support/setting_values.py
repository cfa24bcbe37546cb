"""For each config setting (config-reference.md's keys), another value on a stack file that uses it
(tests/config/test_every_setting_acts.py plans both), or where it acts when it cannot show in a
plan."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DEV, PROD, EXISTING, HYPERPOD, LOCAL = (
    f"Pulumi.{s}.yaml" for s in ("dev", "prod", "existing", "hyperpod", "local")
)
LLAMA, VERL = "examples/llama-c4.yaml", "examples/verl-grpo-existing.yaml"
ACCOUNT = "arn:aws:iam::123456789012"


@dataclass(frozen=True)
class Change:
    stack_file: str
    path: str  # under trainstack: unless it names its namespace (aws:profile); [i] picks a list item
    value: Any  # None: unset
    base: dict[str, Any] = field(default_factory=dict)  # what both plans set first (path -> value)
    also: dict[str, Any] = field(default_factory=dict)  # what the rules require to change with it
    secret_jobs: bool = False  # `trainstack:jobs` is a secret (secretEnv)
    facts: dict[str, Any] = field(default_factory=dict)  # what the offline account answers instead

    @property
    def key(self) -> str:
        """The setting's key as the config reference writes it: trainstack:jobs[].hyperpod.maxRetries."""
        key = re.sub(r"\[\d+\]", "[]", self.path)
        return key if ":" in key.partition(".")[0] else f"trainstack:{key}"


NO_JOBS = {"jobs": []}
# A group without NVMe instance store: checkpoints land on its root gp3 volume.
CPU_GROUP = {"gpuNodeGroups[0].instanceType": "m6i.large", "gpuNodeGroups[0].gpu": False, **NO_JOBS}
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
VPC = {"network.existingVpcId": "vpc-0123456789abcdef0", "network.existingPrivateSubnetIds": SUBNETS}
S3 = {
    "existingCluster.s3": {"uri": "s3://ckpt-bucket/runs", "credentialsSecret": "s3-creds"},
    "existingCluster.checkpointHostPath": None,
}
FSX = {"storage.fsx.enabled": True}
BREAK_GLASS = {"ci.breakGlassRoleArn": f"{ACCOUNT}:role/break-glass"}
CI = {"ci.githubRepository": "example/trainstack", **BREAK_GLASS}
CI_IDS = {**CI, "ci.githubOwnerId": 1234, "ci.githubRepositoryId": 5678}
SERVER = {"tracking.mode": "server"}
EXTERNAL = {"tracking.mode": "external", "tracking.uri": "https://mlflow.example.com"}
RESERVATION = {
    "reservation:cr-0123456789abcdef0": {
        "instanceType": "g6.xlarge",
        "availabilityZone": "us-east-1a",
        "total": 1,
        "available": 1,
    }
}
DOCKER_HUB = {"image.dockerHubUsername": "someone", "dockerHubAccessToken": "dckr_pat_x"}

# fmt: off
TABLE = [
    Change(DEV, "aws:region", "us-west-2"),
    Change(DEV, "aws:profile", "ml"),
    Change(DEV, "tags", {"environment": "dev", "team": "ml"}),
    Change(DEV, "network.vpcCidr", "10.1.0.0/16"),
    Change(DEV, "network.availabilityZones", 3),
    Change(DEV, "network.natGateways", "onePerAz"),
    Change(DEV, "network.existingVpcId", VPC["network.existingVpcId"], also=VPC),
    Change(DEV, "network.existingPrivateSubnetIds", [SUBNETS[0], "subnet-0123456789abcdef2"], VPC),
    Change(DEV, "network.existingPublicSubnetIds", ["subnet-0123456789abcdef3"], VPC),
    Change(EXISTING, "existingCluster.eksClusterName", "ml-platform-2"),
    Change(LOCAL, "existingCluster.kubeconfig", "build/other-kubeconfig"),
    Change(LOCAL, "existingCluster.context", "kind-other"),
    Change(EXISTING, "existingCluster.systemNodes.nodeSelector", {"role": "system"}),
    Change(EXISTING, "existingCluster.systemNodes.cpus", 8),
    Change(EXISTING, "existingCluster.systemNodes.memoryGiB", 64),
    Change(EXISTING, "existingCluster.systemNodes.count", 5),
    Change(EXISTING, "existingCluster.podRoleArn", f"{ACCOUNT}:role/training"),
    Change(LOCAL, "existingCluster.checkpointHostPath", "/mnt/other"),
    Change(LOCAL, "existingCluster.s3", S3["existingCluster.s3"], also=S3),
    Change(LOCAL, "existingCluster.s3.uri", "s3://ckpt-bucket/other", S3),
    Change(LOCAL, "existingCluster.s3.credentialsSecret", "other-creds", S3),
    Change(EXISTING, "existingCluster.checkpointClaim", "fsx-claim"),
    Change(EXISTING, "existingCluster.namespace", "ml"),
    Change(LOCAL, "existingCluster.kindClusterName", "other"),
    Change(DEV, "cluster.kubernetesVersion", "1.35"),
    Change(DEV, "cluster.supportType", "STANDARD"),
    Change(DEV, "cluster.endpointPublicAccess", False, also={"cluster.publicAccessCidrs": []}),
    Change(DEV, "cluster.endpointPrivateAccess", False),
    Change(DEV, "cluster.publicAccessCidrs", ["198.51.100.0/24"]),
    Change(DEV, "cluster.adminPrincipals", [f"{ACCOUNT}:role/admin"]),
    Change(DEV, "cluster.controlPlaneLogs", ["api"]),
    Change(DEV, "cluster.controlPlaneLogRetentionDays", 90),
    Change(DEV, "cluster.systemNodeGroup.instanceType", "m5.large"),
    Change(DEV, "cluster.systemNodeGroup.minSize", 2),
    Change(DEV, "cluster.systemNodeGroup.desiredSize", 3),
    Change(DEV, "cluster.systemNodeGroup.maxSize", 4),
    Change(DEV, "cluster.systemNodeGroup.diskSizeGiB", 100),
    Change(DEV, "cluster.nodeMonitoringAgent", False),
    Change(DEV, "cluster.fenceHungNodesAfterSeconds", 600),
    Change(DEV, "cluster.gpuMetrics", True),
    Change(DEV, "gpuNodeGroups[0].name", "gpu2", NO_JOBS),
    Change(DEV, "gpuNodeGroups[0].instanceType", "g6.2xlarge"),
    Change(DEV, "gpuNodeGroups[0].gpu", False, NO_JOBS, also={"gpuNodeGroups[0].instanceType": "m6i.large"}),
    Change(DEV, "gpuNodeGroups[0].nodeCount", 2),
    Change(DEV, "gpuNodeGroups[0].minNodes", 1),
    Change(PROD, "gpuNodeGroups[0].efa", False, {"gpuNodeGroups[0].placementGroup": False}),
    Change(DEV, "gpuNodeGroups[0].capacityType", "SPOT"),
    Change(DEV, "gpuNodeGroups[0].capacityReservationId", "cr-0123456789abcdef0",
           {"gpuNodeGroups[0].availabilityZone": "us-east-1a"}, facts=RESERVATION),
    Change(PROD, "gpuNodeGroups[0].placementGroup", False),
    Change(DEV, "gpuNodeGroups[0].diskSizeGiB", 300),
    Change(DEV, "gpuNodeGroups[0].diskThroughputMiBps", 500, CPU_GROUP),
    Change(DEV, "gpuNodeGroups[0].diskIops", 6000, CPU_GROUP),
    Change(PROD, "gpuNodeGroups[0].preflight", False),
    Change(PROD, "gpuNodeGroups[0].preflightMinBusBandwidthGBps", 100),
    Change(DEV, "gpuNodeGroups[0].availabilityZone", "us-east-1b"),
    Change(DEV, "gpuNodeGroups[0].autoRepair", False),
    Change(DEV, "gpuNodeGroups[0].health.mode", "burnIn"),
    Change(PROD, "gpuNodeGroups[0].health.dcgmLevel", 1),
    Change(PROD, "gpuNodeGroups[0].health.floorFraction", 0.9),
    Change(EXISTING, "gpuNodeGroups[0].nodeSelector", {"node.kubernetes.io/instance-type": "other"}),
    Change(DEV, "image.builder", "none", {"jobs[0].image": "registry.example.com/train:1"}),
    Change(DEV, "image.context", "examples/byo"),
    Change(DEV, "image.baseImage", "nvidia/cuda:12.8.1-base-ubuntu24.04@sha256:" + "0" * 64),
    Change(DEV, "image.computeType", "BUILD_GENERAL1_XLARGE"),
    Change(DEV, "image.buildTimeoutMinutes", 90),
    Change(DEV, "image.nightlyRebuild", True),
    Change(DEV, "image.sourceRepository", "https://github.com/example/trainstack"),
    Change(DEV, "registry.untaggedExpiryDays", 14),
    Change(DEV, "registry.keepLastImages", 10),
    Change(DEV, "registry.forceDelete", False),
    Change(DEV, "storage.encryption", "KMS"),
    Change(DEV, "storage.checkpointRetentionDays", 60),
    Change(DEV, "storage.checkpointsKept", 5),
    Change(DEV, "storage.checkpointKeepEvery", 100),
    Change(DEV, "storage.buildContextRetentionDays", 30),
    Change(DEV, "storage.protect", True, {"registry.forceDelete": False}),
    Change(DEV, "storage.fsx.enabled", True),
    Change(DEV, "storage.fsx.storageCapacityGiB", 2400, FSX),
    Change(DEV, "storage.fsx.throughputPerTiB", 250, FSX),
    Change(DEV, "storage.fsx.nodeGroups", ["gpu"],
           {**FSX, "gpuNodeGroups[1]": {"name": "more", "instanceType": "g6.xlarge"}}),
    Change(DEV, "storage.datasetsMount", True),
    Change(DEV, "operators.trainingOperator.enabled", False, {"jobs[0].kind": "RayJob"}),
    Change(DEV, "operators.trainingOperator.ref", "0" * 40),
    Change(DEV, "queueing.idleNodeMinutes", 20),
    Change(DEV, "queueing.podsReadyTimeoutMinutes", 30),
    Change(DEV, "queueing.maxNodeProvisionMinutes", 45),
    Change(DEV, "ci.githubRepository", "example/trainstack", also=BREAK_GLASS),
    Change(DEV, "ci.breakGlassRoleArn", f"{ACCOUNT}:role/other-break-glass", CI),
    Change(
        DEV,
        "ci.runner",
        "codebuild",
        {
            **CI,
            "ci.stateBucket": "example-pulumi-state",
            "ci.secretsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab",
        },
    ),
    Change(DEV, "ci.githubOwnerId", 4321, CI_IDS),
    Change(DEV, "ci.githubRepositoryId", 8765, CI_IDS),
    Change(DEV, "ci.environment", "production", CI),
    Change(DEV, "ci.oidcProviderArn", f"{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com", CI),
    Change(DEV, "ci.secretsKeyArn", "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab", CI),
    Change(DEV, "ci.stateBucket", "example-pulumi-state", CI),
    Change(DEV, "tracking.mode", "server"),
    Change(DEV, "tracking.uri", "https://mlflow2.example.com", EXTERNAL),
    Change(DEV, "tracking.experiment", "ablations", SERVER),
    Change(DEV, "tracking.server.database", "rds", SERVER),
    Change(DEV, "tracking.server.instanceClass", "db.t4g.small", {**SERVER, "tracking.server.database": "rds"}),
    Change(DEV, "tracking.server.storageGiB", 40, SERVER),
    Change(LLAMA, "datasets[0].name", "other", {"jobs[0].dataset": None}),
    Change(LLAMA, "datasets[0].source", "HuggingFaceFW/fineweb-edu", {"datasets[0].config": "default"}),
    Change(LLAMA, "datasets[0].config", "realnewslike"),
    Change(LLAMA, "datasets[0].split", "validation"),
    Change(LLAMA, "datasets[0].textField", "content"),
    Change(LLAMA, "datasets[0].tokenizer", "gpt2"),
    Change(LLAMA, "datasets[0].eosToken", "<|endoftext|>"),
    Change(LLAMA, "datasets[0].maxTokens", 200000000),
    Change(LLAMA, "datasets[0].valTokens", 2000000),
    Change(LLAMA, "datasets[0].timeoutMinutes", 480),
    Change(DEV, "jobs[0].name", "other"),
    Change(DEV, "jobs[0].kind", "RayJob"),
    Change(DEV, "jobs[0].nodeGroup", "system"),
    Change(DEV, "jobs[0].nodes", 2, {"gpuNodeGroups[0].nodeCount": 2}),
    Change(DEV, "jobs[0].model", "small"),
    Change(DEV, "jobs[0].steps", 200),
    Change(DEV, "jobs[0].image", "registry.example.com/train:1"),
    Change(DEV, "jobs[0].command", ["python", "-m", "trainer.train"]),
    Change(DEV, "jobs[0].args", ["--batch-size", "4"]),
    Change(LLAMA, "jobs[0].dataset", None),
    Change(DEV, "jobs[0].env", {"LOG_LEVEL": "debug"}),
    Change(DEV, "jobs[0].secretEnv", {"WANDB_API_KEY": "k"}, secret_jobs=True),
    Change(DEV, "jobs[0].wait", "admitted"),
    Change(DEV, "jobs[0].timeoutMinutes", 120),
    Change(DEV, "jobs[0].maxRecreations", 5),
    Change(DEV, "jobs[0].s3Read", ["s3://other-bucket/data"]),
    Change(PROD, "jobs[0].placement", "required"),
    Change(DEV, "jobs[0].verl", {}, {"jobs[0].kind": "RayJob"}),
    Change(VERL, "jobs[0].verl.algorithm", "ppo"),
    Change(VERL, "jobs[0].verl.model", "Qwen/Qwen2.5-1.5B-Instruct"),
    Change(VERL, "jobs[0].verl.epochs", 2),
    Change(VERL, "jobs[0].verl.batchSize", 128),
    Change(VERL, "jobs[0].verl.rollouts", 4),
    Change(VERL, "jobs[0].verl.tensorParallel", 2),
    Change(VERL, "jobs[0].verl.saveEvery", 10),
    Change(HYPERPOD, "jobs[0].hyperpod.deepHealthCheck", "required"),
    Change(HYPERPOD, "jobs[0].hyperpod.maxRetries", 9),
    Change(DEV, "hfToken", "hf_x"),
    Change(DEV, "operators.chartRepository", "oci://123456789012.dkr.ecr.us-east-1.amazonaws.com/charts"),
    Change(DEV, "trackingToken", "t", EXTERNAL),
    # A secret shows in a plan as [secret]: set against unset.
    Change(DEV, "trackingPassword", "pw", EXTERNAL, also={"tracking.username": "u"}),
    Change(DEV, "dockerHubAccessToken", "dckr_pat_x", also={"image.dockerHubUsername": "someone"}),
    # dev's job is a TrainJob: with Trainer off it runs as a PyTorchJob in both plans.
    *(Change(PROD if op == "efaDevicePlugin" else DEV, f"operators.{op}.{key}", value,
             {"jobs[0].kind": "PyTorchJob"} if (op, key) == ("trainer", "enabled") else {})
      for op in ("nvidiaDevicePlugin", "efaDevicePlugin", "kuberay", "trainer", "kueue", "clusterAutoscaler")
      for key, value in (("enabled", False), ("version", "9.9.9"), ("values", {"extra": "1"}))
      if (op, key) != ("kuberay", "version")),
]
# fmt: on
CHANGES: dict[str, Change] = {c.key: c for c in TABLE}

# Settings that act where a plan's resources do not show them, and where.
ACTS_ELSEWHERE: dict[str, str] = {
    "trainstack:image.dockerHubUsername": "in the pull-through cache's credentials secret, beside the "
    "token, which a plan shows as [secret] (components/image.py); set with the token, it makes the cache "
    "(dockerHubAccessToken's change)",
    "trainstack:tracking.username": "in the tracking credentials Secret (MLFLOW_TRACKING_USERNAME, beside "
    "the password), which a plan shows as [secret] (planes/tracking.py); set with the password, it makes "
    "the Secret (trackingPassword's change)",
    **{
        f"trainstack:operators.{op}.mode": "the operators' reuse-or-install decision on a cluster the stack "
        "did not create, before anything is registered (planes/operators.py existing_operators): another "
        "mode either plans the same or stops the program"
        for op in ("nvidiaDevicePlugin", "efaDevicePlugin", "trainingOperator", "kuberay", "trainer", "kueue")
    },
    "trainstack:operators.trainer.jobsetMode": "the same decision for JobSet, which Trainer runs on "
    "(account_checks/operator_decisions.py): another mode either plans the same or stops the program",
    "trainstack:gpuNodeGroups[].hourlyUsd": "the price the stack's outputs give each job while it runs "
    "(jobs.<job>.hourlyUsd, components/jobs/training_job.py) and the plan's cost lines (offline/cost.py)",
    "trainstack:existingCluster.hyperPodClusterName": "SageMaker's DescribeCluster before anything is "
    "registered, whose EKS cluster the stack then deploys onto as by eksClusterName "
    "(account_checks/hyperpod_cluster.py; tests/offline/test_hyperpod_by_name.py: the same plan, and each "
    "answer it cannot deploy onto stops it)",
    "trainstack:ci.accountMode": "the line `pulumi up` and the plan print on whether the environment has an "
    "account of its own (planes/ci.py account_mode_line), and the account check that stops a perEnvironment "
    "stack whose account holds another stack's roles (account_checks/account_mode.py, "
    "tests/account_checks/test_account.py); the fence is the same either way",
    "trainstack:gpuNodeGroups[].faultsPerMillionGpuHours": "the plan's faults line and its run's goodput, "
    "time and cost per billion tokens (offline/training_lines.py, domain/faults.py; "
    "tests/offline/test_plan_jobs.py test_the_plan_counts_faults_and_names_the_interval_that_loses_least)",
    "trainstack:jobs[].verl.modelBillions": "the config's fit check of a VERL job on its group "
    "(config/checks.py _check_verl, domain/verl_fit.py verl_fits)",
    "trainstack:jobs[].verl.dataset": "one allowed value (gsm8k): components/jobs/verl.py data_prep_command",
    "trainstack:operators.manifestMirror": "a folder that must hold every file it serves, so no fixed value "
    "plans: the training operator's Directory and KubeRay's CRD ConfigGroup read from it "
    "(domain/operators.py training_operator_location, kuberay_crd_files; tests/planes/test_manifest_mirror.py)",
    "trainstack:operators.kuberay.version": "one allowed value, the chart whose CRDs the stack applies "
    "(domain/operators.py KUBERAY_CRD_COMMITS): components/operators.py",
}
