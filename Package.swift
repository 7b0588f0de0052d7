// swift-tools-version:6.0
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "shoal",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Shoal", targets: ["Shoal"]),
        .executable(name: "shoal", targets: ["shoal"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-protobuf.git", exact: "1.39.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", exact: "1.5.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "3.12.3"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", exact: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", exact: "1.7.4"),
        // Hubs on PostgreSQL (ShoalPostgres): the Swift server stack's PostgreSQL client.
        .package(url: "https://github.com/vapor/postgres-nio.git", exact: "1.33.2"),
    ],
    targets: [
        .target(name: "ShoalCRDT", swiftSettings: swiftSettings),
        .target(name: "ShoalQuery", dependencies: ["ShoalCRDT"], swiftSettings: swiftSettings),
        .target(
            name: "ShoalWire",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The store contract and the values it speaks in, with no engine: what ShoalSync
        // is written against, and what each engine (SQLite in ShoalStore, PostgreSQL in
        // ShoalPostgres) implements.
        .target(
            name: "ShoalStorage",
            dependencies: [
                "ShoalCRDT", "ShoalQuery", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The birth time of a file (statx), which Swift's Glibc module does not declare.
        .target(name: "CShoalFile"),
        .target(
            name: "ShoalStore",
            dependencies: [
                "CShoalFile", "ShoalCRDT", "ShoalQuery", "ShoalStorage",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalSync",
            dependencies: [
                "ShoalCRDT", "ShoalQuery", "ShoalStorage", "ShoalWire",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalNode",
            dependencies: [
                "ShoalCRDT", "ShoalQuery", "ShoalStorage", "ShoalSync", "ShoalWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalPostgres",
            dependencies: [
                "ShoalCRDT", "ShoalStorage", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ShoalPostgresTests",
            dependencies: [
                "ShoalPostgres", "ShoalCRDT", "ShoalStorage", "ShoalStore", "ShoalSync", "ShoalTesting", "ShoalWire",
                .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalBulk",
            dependencies: ["ShoalCRDT", "ShoalQuery", "ShoalStorage", "ShoalNode"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalShell",
            dependencies: ["ShoalCRDT"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "shoal",
            dependencies: [
                "Shoal", "ShoalNode", "ShoalCRDT", "ShoalSync", "ShoalStorage", "ShoalBulk", "ShoalShell", "ShoalPostgres",
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Shoal",
            dependencies: [
                "ShoalCRDT", "ShoalNode", "ShoalStorage", "ShoalStore", "ShoalSync", "ShoalWire", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // An app that embeds a node, importing only `Shoal`; CI runs it.
        .executableTarget(name: "shoal-example", dependencies: ["Shoal"], path: "Examples/EmbeddedApp", swiftSettings: swiftSettings),
        .executableTarget(
            name: "shoal-bench",
            dependencies: [
                "ShoalCRDT", "ShoalStorage", "ShoalStore", "ShoalSync", "ShoalNode", "ShoalWire", "ShoalTesting", "ShoalPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(name: "ShoalCheck", dependencies: ["ShoalCRDT"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "shoal-check",
            dependencies: [
                "ShoalCheck", "ShoalCRDT", "ShoalNode", "ShoalPostgres", "ShoalSync", "ShoalTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "ShoalTesting",
            dependencies: [
                "ShoalCRDT", "ShoalStorage", "ShoalStore", "ShoalSync", "ShoalWire", "ShoalNode", "ShoalPostgres", .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "ShoalCheckTests", dependencies: ["ShoalCheck", "ShoalCRDT"], swiftSettings: swiftSettings),
        .testTarget(name: "ShoalCRDTTests", dependencies: ["ShoalCRDT", "ShoalTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "ShoalBulkTests", dependencies: ["ShoalBulk", "ShoalCRDT", "ShoalNode", "ShoalStorage", "ShoalStore"], swiftSettings: swiftSettings),
        .testTarget(name: "ShoalShellTests", dependencies: ["ShoalShell", "ShoalCRDT"], swiftSettings: swiftSettings),
        .testTarget(name: "ShoalQueryTests", dependencies: ["ShoalQuery", "ShoalCRDT", "ShoalTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "ShoalWireTests",
            dependencies: ["ShoalWire", "ShoalSync", "ShoalTesting", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ShoalStoreTests",
            dependencies: ["ShoalStorage", "ShoalStore", "ShoalPostgres", "ShoalSync", "ShoalTesting", .product(name: "Logging", package: "swift-log")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ShoalSyncTests",
            dependencies: [
                "ShoalSync", "ShoalStorage", "ShoalTesting", "ShoalWire", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"), .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "ShoalNodeTests",
            dependencies: [
                "Shoal", "ShoalCRDT", "ShoalNode", "ShoalPostgres", "ShoalStorage", "ShoalStore", "ShoalSync", "ShoalTesting", "ShoalWire", "shoal",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
