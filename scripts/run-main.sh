#!/usr/bin/env bash
# The main job: miopy-driver on a real convolution (a ResNet-50 3x3 layer, batch 4), all three
# directions, verified against the CPU reference and timed, on the default backend.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh" opencl
miopy-driver conv -n 4 -c 64 -H 28 -W 28 -k 64 -y 3 -x 3 -p 1 -q 1 -u 1 -v 1 -F 0 -V 1 -t 1 -i 5 "$@"
