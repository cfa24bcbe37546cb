#!/bin/sh
# Installs the AWS EFA user-space stack (libfabric with the EFA provider, Open MPI, the aws-ofi-nccl
# plugin NCCL uses for EFA) from the installer tarball, checked against its pinned SHA-256 before
# anything in it runs. Both image stages of workload/Dockerfile run it with the Dockerfile's
# EFA_INSTALLER_VERSION and EFA_INSTALLER_SHA256.
# --skip-kmod: the kernel module lives on the node (EKS AL2023 NVIDIA AMI); without it the
# installer needs no compiler.
set -eu
: "${EFA_INSTALLER_VERSION:?set by the Dockerfile}" "${EFA_INSTALLER_SHA256:?set by the Dockerfile}"
work="$(mktemp -d)"
tarball="$work/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"
curl -fsSL --retry 3 -o "$tarball" "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"
echo "${EFA_INSTALLER_SHA256}  ${tarball}" | sha256sum -c -
tar -xzf "$tarball" -C "$work"
cd "$work/aws-efa-installer"
./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify
cd /
rm -rf "$work"
