# The lessons in a Linux container, for any machine with Docker (Intel Macs, macOS before 14, musl
# Linux, Windows): the README's `make lab`, in an image built from a fresh Debian with Python 3.11.
#
#   docker build -t ddp-lib .
#   docker run --rm -p 8888:8888 ddp-lib        # make lab; open the http://127.0.0.1:8888/lab?token=... URL it prints
#   docker run --rm -it ddp-lib make test       # the README's other command
#
# The cluster lab (lesson 06's two hosts and SLURM, make test-cluster) builds network namespaces, so
# it needs root in the container (the default here) and two capabilities Docker does not grant by
# default: NET_ADMIN (veth links, addresses, nft rules) and SYS_ADMIN (unshare, the bind mounts of
# each host's /etc/hosts and of /run/netns). Where AppArmor confines containers (Ubuntu hosts), its
# docker-default profile also refuses those mounts: add --security-opt apparmor=unconfined.
#
#   docker run --rm -p 8888:8888 --cap-add NET_ADMIN --cap-add SYS_ADMIN ddp-lib
#   docker run --rm --cap-add NET_ADMIN --cap-add SYS_ADMIN ddp-lib make test-cluster
#
# Without them those cells say what they would show and the cluster tests skip.

# base: the system packages the lessons and the cluster lab use; .devcontainer/ builds this stage
# and installs the project into the workspace it mounts.
FROM python:3.11-slim-bookworm AS base
# make: the README's commands; git: nbdime's git driver, the notebook-merge tests; iproute2, nftables,
# util-linux, procps: the cluster lab (ip netns, nft, unshare/nsenter, ps). SLURM and munge are
# installed by the cluster tests themselves when they run (apt-get), as on any Debian machine.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends make git iproute2 nftables util-linux procps ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# lab: the project installed by the README's own command (make install, which `make lab` runs
# first): .venv with every version pinned by constraints.txt, torch's CPU-only build.
FROM base AS lab
WORKDIR /ddp-lib
COPY . .
RUN make install
# JupyterLab listens on every interface of the container, so that -p 8888:8888 reaches it.
ENV LAB_IP=0.0.0.0
EXPOSE 8888
CMD ["make", "lab"]
