#!/bin/sh
# Install the Debian packages cogvideox.c needs. Idempotent: quick when all are present.
set -e
PKGS="build-essential pkg-config libjson-c-dev libopenblas-dev libopenblas-openmp-dev \
libsentencepiece-dev libicu-dev libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libcmocka-dev ffmpeg libdnnl-dev \
libopenmpi-dev openmpi-bin libcairo2-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "deps: all packages present"
    exit 0
fi
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
