import ShoalCRDT
import ShoalStorage
import ShoalSync
import Logging
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// LAN discovery: announces this node over UDP multicast and dials the nodes of
/// its mesh that it hears (PROTOCOL.md §16). The decisions are `DiscoveryTable`'s;
/// this type only moves datagrams.
///
/// It listens and announces on the interfaces `--discovery-interface` names, or on
/// every interface that has an IPv4 address and supports multicast. It accepts
/// datagrams only from the networks of those interfaces, and dials only the host a
/// datagram came from. On the loopback interface the multicast TTL is 0, so nothing
/// leaves the machine.
final class LANDiscovery: Sendable {
    /// An interface discovery uses.
    struct Interface: Sendable {
        var name: String
        var address: SocketAddress
        var netmask: SocketAddress?
        var device: NIONetworkDevice
        var isLoopback: Bool

        var host: String { address.ipAddress ?? "?" }

        /// Whether `source` is on this interface's network.
        func contains(_ source: SocketAddress) -> Bool {
            guard let theirs = source.ipAddress.flatMap(Self.bits), let mine = address.ipAddress.flatMap(Self.bits) else {
                return false
            }
            if isLoopback { return theirs >> 24 == 127 }
            let mask = netmask?.ipAddress.flatMap(Self.bits) ?? 0xFFFF_FFFF
            return mine & mask == theirs & mask
        }

        /// A dotted IPv4 address as a number, most significant octet first.
        static func bits(_ text: String) -> UInt32? {
            let parts = text.split(separator: ".").compactMap { UInt32($0) }
            guard parts.count == 4, parts.allSatisfy({ $0 < 256 }) else { return nil }
            return parts.reduce(0) { $0 << 8 | $1 }
        }
    }

    /// `struct ip_mreq`: the group and the interface, IPv4 addresses in network order.
    struct Membership {
        var group: UInt32
        var interface: UInt32
    }

    /// How often a node announces itself.
    static let interval: Duration = .seconds(1)
    /// A site not heard for this long is forgotten.
    static let expiry: Duration = .seconds(5)
    /// How long the node with the larger site ID waits for the other to dial it.
    static let grace: Duration = .seconds(3)

    let interfaces: [Interface]
    let port: Int
    let table: Locked<DiscoveryTable>
    private let refusalsLogged = Locked<Set<String>>([])

    init(interfaces: [Interface], port: Int = Announcement.port, ownSite: SiteID) {
        self.interfaces = interfaces
        self.port = port
        self.table = Locked(DiscoveryTable(ownSite: ownSite, expiry: Self.expiry, grace: Self.grace))
    }

    /// The interfaces `selection` names (an interface name or one of its IPv4
    /// addresses), or, without one, every multicast-capable interface with an IPv4 address.
    static func interfaces(_ selection: String?) throws(ShoalError) -> [Interface] {
        let devices: [NIONetworkDevice]
        do {
            devices = try System.enumerateDevices()
        } catch {
            throw ShoalError(.invalidConfiguration, "cannot list the network interfaces for discovery: \(error)")
        }
        let ipv4 = devices.compactMap { device -> Interface? in
            guard let address = device.address, case .v4 = address else { return nil }
            let loopback = address.ipAddress?.hasPrefix("127.") ?? false
            return Interface(name: device.name, address: address, netmask: device.netmask, device: device, isLoopback: loopback)
        }
        guard let selection else { return ipv4.filter { $0.device.multicastSupported && !$0.isLoopback } }
        let chosen = ipv4.filter { $0.name == selection || $0.host == selection }
        guard !chosen.isEmpty else {
            let names = ipv4.map { "\($0.name) (\($0.host))" }.joined(separator: ", ")
            throw ShoalError(
                .invalidConfiguration,
                "--discovery-interface \(selection): no interface of that name or IPv4 address (this machine has \(names))")
        }
        return chosen
    }

    /// Announces and listens until the task is cancelled; calls `dial` once for each
    /// new site heard, in a child task that it ends when discovery stops.
    func run(
        group: any EventLoopGroup, announcement: @escaping @Sendable (Interface, UInt64) -> Announcement?, key: [UInt8]?,
        meshName: String, logger: Logger, dial: @escaping @Sendable (SiteID, String) async -> Void
    ) async throws {
        typealias Datagrams = NIOAsyncChannel<AddressedEnvelope<ByteBuffer>, AddressedEnvelope<ByteBuffer>>
        let groupAddress = try SocketAddress(ipAddress: Announcement.group, port: port)
        let receiver = try await DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(ChannelOptions.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
            .bind(host: "0.0.0.0", port: port) { channel in
                channel.eventLoop.makeCompletedFuture { try Datagrams(wrappingChannelSynchronously: channel) }
            }
        // Every path out of here goes through executeThenClose, which closes the channel.
        try await receiver.executeThenClose { inbound, _ in
            #if os(Linux)
            // Only the groups this socket joined, on the interfaces it joined them on.
            try await receiver.channel.setOption(
                ChannelOptions.ipOption(NIOBSDSocket.Option(rawValue: 49 /* IP_MULTICAST_ALL */)), value: 0)
            #endif
            var senders: [(Interface, any Channel)] = []
            defer { for (_, sender) in senders { sender.close(promise: nil) } }
            for interface in interfaces {
                // IP_ADD_MEMBERSHIP by hand: NIO's joinGroup refuses interfaces without the
                // MULTICAST flag, and the loopback interface has none, yet carries multicast.
                let membership = Membership(group: (Interface.bits(Announcement.group) ?? 0).bigEndian, interface: (Interface.bits(interface.host) ?? 0).bigEndian)
                try await (receiver.channel as! any SocketOptionProvider).unsafeSetSocketOption(
                    level: .ip, name: .ip_add_membership, value: membership
                ).get()
                let sender = try await DatagramBootstrap(group: group).bind(host: interface.host, port: 0).get()
                senders.append((interface, sender))
                let options = sender as! any SocketOptionProvider
                // IP_MULTICAST_IF takes an in_addr: the address's 4 bytes in network order.
                let outgoing = (Interface.bits(interface.host) ?? 0).bigEndian
                try await options.unsafeSetSocketOption(level: .ip, name: .ip_multicast_if, value: outgoing).get()
                try await options.setIPMulticastTTL(interface.isLoopback ? 0 : 1).get()
                try await options.setIPMulticastLoop(1).get()
            }
            logger.info(
                "LAN discovery on \(interfaces.map { "\($0.name) (\($0.host))" }.joined(separator: ", ")), group \(Announcement.group):\(port)",
                metadata: ["shoal.mesh": "\(meshName)"])
            try await withThrowingDiscardingTaskGroup { tasks in
                tasks.addTask { [senders] in
                    var sequence: UInt64 = 0
                    while !Task.isCancelled {
                        sequence += 1
                        for (interface, sender) in senders {
                            guard let bytes = announcement(interface, sequence)?.encode(key: key) else { continue }
                            let envelope = AddressedEnvelope(remoteAddress: groupAddress, data: ByteBuffer(bytes: bytes))
                            do {
                                try await sender.writeAndFlush(envelope)
                            } catch {
                                logger.debug("could not announce on \(interface.name): \(error)")
                            }
                        }
                        try await Task.sleep(for: Self.interval)
                    }
                }
                tasks.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: .seconds(1))
                        for site in self.table.withLock({ $0.expire(at: .now) }) {
                            logger.info("peer no longer heard on the LAN", metadata: ["shoal.peer.site": "\(site)"])
                        }
                    }
                }
                for try await envelope in inbound {
                    guard self.interfaces.contains(where: { $0.contains(envelope.remoteAddress) }),
                        let source = envelope.remoteAddress.ipAddress
                    else { continue }
                    let announcement: Announcement
                    do throws(Announcement.Refusal) {
                        announcement = try Announcement.decode(Array(buffer: envelope.data), meshName: meshName, key: key)
                    } catch {
                        self.refused(source: source, reason: error, logger: logger)
                        continue
                    }
                    let outcome = self.table.withLock { $0.heard(announcement, from: source, at: .now) }
                    if case .new(let site, let address) = outcome {
                        logger.info(
                            "discovered a peer on the LAN",
                            metadata: [
                                "shoal.peer.site": "\(site)", "shoal.peer.name": "\(announcement.nodeName)",
                                "shoal.peer.address": "\(address)",
                            ])
                        tasks.addTask { await dial(site, address) }
                    }
                }
            }
        }
    }

    /// Logs each source and reason once: a LAN may hold other meshes for good.
    private func refused(source: String, reason: Announcement.Refusal, logger: Logger) {
        // At most 1000 distinct lines, so a LAN full of made-up sites cannot grow the set.
        let new = refusalsLogged.withLock { logged in logged.count < 1000 && logged.insert("\(source) \(reason)").inserted }
        guard new else { return }
        switch reason {
        case .malformed:
            logger.debug("ignoring a datagram that is not a Shoal announcement", metadata: ["shoal.peer.address": "\(source)", "shoal.reason": "\(reason)"])
        case .otherMesh, .keyMismatch:
            logger.notice("refusing a peer heard on the LAN: announcement \(reason)", metadata: ["shoal.peer.address": "\(source)"])
        }
    }
}
