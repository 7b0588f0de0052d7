// swift-tools-version:6.0
// libFuzzer targets for Shoal. A package of their own, so the main build never sees
// the fuzzer flags: build and run them with scripts/fuzz.sh, which does
//   swift build --package-path Tests/Fuzz --scratch-path .build-fuzz \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld
// Each target's entry point hands one harness function to libFuzzer's driver.
import Foundation
import PackageDescription

// The main package, two folders up; SwiftPM names a path dependency after its folder.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let shoal = root.lastPathComponent.lowercased()

func fuzzTarget(_ name: String) -> Target {
    .executableTarget(
        name: name, dependencies: ["FuzzSupport", "FuzzDriver"], path: "Sources/\(name)",
        swiftSettings: [.unsafeFlags(["-parse-as-library"])])
}

let package = Package(
    name: "shoal-fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: root.path)],
    targets: [
        // Shoal's product re-exports the node's modules; the targets below also import
        // ShoalWire and ShoalQuery, which it builds and links.
        .target(name: "FuzzDriver", path: "Sources/FuzzDriver"),
        .target(name: "FuzzSupport", dependencies: [.product(name: "Shoal", package: shoal)], path: "Sources/FuzzSupport"),
        fuzzTarget("FuzzFrameDecoder"),
        fuzzTarget("FuzzMessages"),
        fuzzTarget("FuzzInflate"),
        fuzzTarget("FuzzJSON"),
        fuzzTarget("FuzzDQL"),
        fuzzTarget("FuzzCoverage"),
        fuzzTarget("FuzzBatchReader"),
        fuzzTarget("FuzzPermissions"),
    ]
)
