#!/usr/bin/env bash
# Regenerates Sources/ShoalWire/Generated/shoal.pb.swift from Protocol/shoal.proto.
#
# Needs protoc (Debian: apt-get install protobuf-compiler) and swift-protobuf's
# plugin, built from the same version the package depends on (1.39.0). Building the
# plugin takes minutes, which is why the generated code is committed.
#   PROTOC_GEN_SWIFT=/path/to/protoc-gen-swift Protocol/generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
plugin=${PROTOC_GEN_SWIFT:-}
if [ -z "$plugin" ]; then
  work=${SHOAL_PROTOBUF_CHECKOUT:-.build-protobuf/swift-protobuf}
  if [ ! -x "$work/.build/debug/protoc-gen-swift" ]; then
    mkdir -p "$(dirname "$work")"
    [ -d "$work" ] || git clone -q --branch 1.39.0 https://github.com/apple/swift-protobuf.git "$work"
    (cd "$work" && swift build --product protoc-gen-swift)
  fi
  plugin="$work/.build/debug/protoc-gen-swift"
fi
mkdir -p Sources/ShoalWire/Generated
protoc --plugin=protoc-gen-swift="$plugin" \
  --swift_opt=Visibility=Public \
  --swift_opt=UseAccessLevelOnImports=true \
  --swift_out=Sources/ShoalWire/Generated \
  -I Protocol Protocol/shoal.proto
echo "generated Sources/ShoalWire/Generated/shoal.pb.swift"
