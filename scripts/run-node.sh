#!/usr/bin/env bash
# Sets up, builds and starts one node on the embedded default store:
#   scripts/run-node.sh                       # data in ./shoal-data, listening on 127.0.0.1:7470
#   scripts/run-node.sh --listen 0.0.0.0:7470 --peer 192.0.2.10:7470 --subscribe "SELECT * FROM cars"
# Any flag of `shoal run` may follow; Ctrl-C stops the node. LAN discovery runs on
# the loopback interface only, unless a --discovery... flag or --config says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --product shoal
args=("$@")
[[ " ${args[*]-} " == *" --data "* ]] || args+=(--data ./shoal-data)
[[ " ${args[*]-} " == *" --listen "* ]] || args+=(--listen 127.0.0.1:7470)
# LAN discovery stays on this machine unless asked for: a node on 127.0.0.1 has
# nothing to announce to the LAN, and joining a multicast group there sends packets.
[[ " ${args[*]-} " == *" --discovery"* || " ${args[*]-} " == *" --no-discovery "* || " ${args[*]-} " == *" --config "* ]] \
  || args+=(--discovery-interface lo)
exec "$(swift build --show-bin-path)/shoal" run "${args[@]}"
