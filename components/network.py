"""The VPC the cluster runs in: private subnets for nodes, public subnets for NAT and load balancers.

An S3 gateway endpoint keeps checkpoint and image-layer traffic off the NAT gateways.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class NetworkArgs:
    cluster_name: str  # for the kubernetes.io/cluster/<name> subnet tag
    vpc_cidr: str
    zones: tuple[str, ...]  # AZs of a created VPC, one private and one public subnet each
    nat_per_az: bool
    region: str
    existing_vpc_id: str | None = None
    existing_private_subnet_ids: tuple[str, ...] = ()
    existing_public_subnet_ids: tuple[str, ...] = ()
    existing_private_subnet_zones: dict[str, str] = field(default_factory=dict)  # AZ -> subnet id


def subnet_cidrs(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """Private subnets get one eighth of the VPC each (room for pod IPs); public ones share the last eighth."""
    eighths = list(ipaddress.IPv4Network(vpc_cidr).subnets(prefixlen_diff=3))
    private = [str(n) for n in eighths[:zones]]
    public = [str(n) for n in list(eighths[-1].subnets(prefixlen_diff=3))[:zones]]
    return private, public


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_by_zone: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:network:Network", name, None, opts)
        if args.existing_vpc_id:
            self.vpc_id = pulumi.Output.from_input(args.existing_vpc_id)
            self.private_subnet_ids = [pulumi.Output.from_input(s) for s in args.existing_private_subnet_ids]
            self.public_subnet_ids = [pulumi.Output.from_input(s) for s in args.existing_public_subnet_ids]
            self.private_subnet_by_zone = {
                zone: pulumi.Output.from_input(s) for zone, s in args.existing_private_subnet_zones.items()
            }
            self.nat_gateway_count = 0
        else:
            self._create(name, args)
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )

    def _create(self, name: str, args: NetworkArgs) -> None:
        child = pulumi.ResourceOptions(parent=self)
        zones = list(args.zones)
        private_cidrs, public_cidrs = subnet_cidrs(args.vpc_cidr, len(zones))
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            name,
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": name},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{name}-igw"}, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags={"Name": f"{name}-public"},
            opts=child,
        )

        public, private, nats, private_route_tables = [], [], [], []
        for i, zone in enumerate(zones):
            suffix = zone[-1]
            subnet = aws.ec2.Subnet(
                f"{name}-public-{suffix}",
                vpc_id=vpc.id,
                cidr_block=public_cidrs[i],
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags={"Name": f"{name}-public-{suffix}", "kubernetes.io/role/elb": "1", **cluster_tag},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{suffix}", subnet_id=subnet.id, route_table_id=public_rt.id, opts=child
            )
            public.append(subnet)
            if args.nat_per_az or i == 0:
                eip = aws.ec2.Eip(
                    f"{name}-nat-{suffix}", domain="vpc", tags={"Name": f"{name}-nat-{suffix}"}, opts=child
                )
                nats.append(
                    aws.ec2.NatGateway(
                        f"{name}-nat-{suffix}",
                        allocation_id=eip.id,
                        subnet_id=subnet.id,
                        tags={"Name": f"{name}-nat-{suffix}"},
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                    )
                )
        for i, zone in enumerate(zones):
            suffix = zone[-1]
            nat = nats[i] if args.nat_per_az else nats[0]
            subnet = aws.ec2.Subnet(
                f"{name}-private-{suffix}",
                vpc_id=vpc.id,
                cidr_block=private_cidrs[i],
                availability_zone=zone,
                tags={
                    "Name": f"{name}-private-{suffix}",
                    "kubernetes.io/role/internal-elb": "1",
                    **cluster_tag,
                },
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{suffix}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                tags={"Name": f"{name}-private-{suffix}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{suffix}", subnet_id=subnet.id, route_table_id=rt.id, opts=child
            )
            private.append(subnet)
            private_route_tables.append(rt)

        # Checkpoints (a 1B model's is ~13 GB) and ECR image layers (served from S3) stay off the
        # NAT gateways' per-GB charge. ECR's own API endpoints would cost per AZ-hour for the small
        # manifest calls that remain, so they are left out.
        self.s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_route_tables],
            tags={"Name": f"{name}-s3"},
            opts=child,
        )

        self.vpc_id = vpc.id
        self.private_subnet_ids = [s.id for s in private]
        self.public_subnet_ids = [s.id for s in public]
        self.private_subnet_by_zone = {zone: s.id for zone, s in zip(zones, private, strict=True)}
        self.nat_gateway_count = len(nats)
