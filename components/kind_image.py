"""The training image for a kind cluster: built by the local Docker (pulumi-docker, no registry) and
loaded onto every kind node with `kind load docker-image`, the way kind documents for local images.

The tag is the same content hash the CodeBuild path uses, so a changed `workload/` is a new image
and relaunches the jobs that run it; an unchanged one builds and loads nothing.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.image import IMAGE_PLATFORM, context_archive, docker_build, image_tag

LOCAL_REPOSITORY = "trainstack"
ARM_MACHINES = ("arm64", "aarch64")


def architecture_problem(machine: str) -> str | None:
    """kind's nodes are containers of this machine's architecture: on an arm64 machine (Apple
    Silicon) they cannot run the amd64 image the stack builds (the lock holds x86_64 wheels only),
    and its pods would fail at start with `exec format error`. Said before anything is built."""
    if machine.lower() not in ARM_MACHINES:
        return None
    return (
        f"trainstack:image.builder = kind: this machine is {machine}, so kind's nodes run arm64 images, "
        f"and the training image is built for {IMAGE_PLATFORM} from a lock of x86_64 wheels "
        "(workload/requirements.lock); run the kind stack on an x86_64 machine, or set image.builder: none "
        "and give every job an arm64 image of your own"
    )


@dataclass(frozen=True)
class KindImageArgs:
    context_dir: Path
    base_image: str
    kind_cluster_name: str


class KindImage(pulumi.ComponentResource):
    image_uri: pulumi.Output[str]

    def __init__(self, name: str, args: KindImageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:build:KindImage", name, None, opts)
        self.image_tag = image_tag(context_archive(args.context_dir), args.base_image)
        reference = f"{LOCAL_REPOSITORY}:{self.image_tag}"
        image = docker.Image(
            name,
            image_name=reference,
            build=docker_build(args.context_dir, args.base_image),
            skip_push=True,  # kind nodes cannot pull from the local Docker: the image is loaded
            opts=pulumi.ResourceOptions(parent=self),
        )
        load = command.local.Command(
            f"{name}-kind-load",
            create=shlex.join(["kind", "load", "docker-image", reference, "--name", args.kind_cluster_name]),
            # A new build (new tag) loads again; deleting the stack leaves the nodes' copy alone.
            triggers=[image.image_name],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[image]),
        )
        # Jobs name the tag (pulled IfNotPresent: the loaded copy), once it is on the nodes.
        self.image_uri = load.stdout.apply(lambda _: reference)
        self.register_outputs({"imageUri": self.image_uri})
