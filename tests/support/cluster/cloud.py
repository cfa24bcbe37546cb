"""AWS for a tier drill: moto's server on a port of its own, one Auto Scaling group of GPU nodes'
instances in it, and the environment that points a pod's AWS SDK there (support/cluster/pods.py
OperatorPods `cloud`). moto keeps one account per process, which every drill's server shares: each
reads its own group by name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
from moto.server import ThreadedMotoServer

from support.ports import unused_port

REGION = "us-east-1"


@dataclass(frozen=True)
class Cloud:
    env: dict[str, str]  # what a pod's SDK reads
    ec2: object
    autoscaling: object
    instances: list[str]  # the group's, in order


@contextmanager
def auto_scaling_group(name: str, size: int, min_size: int) -> Iterator[Cloud]:
    port = unused_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    ec2 = session.client("ec2", endpoint_url=env["AWS_ENDPOINT_URL"])
    autoscaling = session.client("autoscaling", endpoint_url=env["AWS_ENDPOINT_URL"])
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": image, "InstanceType": "p5.48xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name},
        MinSize=min_size,
        MaxSize=size,
        DesiredCapacity=size,
        AvailabilityZones=[f"{REGION}a"],
    )
    (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    try:
        yield Cloud(env, ec2, autoscaling, [i["InstanceId"] for i in group["Instances"]])
    finally:
        server.stop()
