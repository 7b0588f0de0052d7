import Foundation
import ShoalTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension ProcessSuites {
/// `shoal run --metrics` and `--log-format json` on real processes, scraped over a plain socket.
@Suite(.serialized) struct ProcessMetricsTests {
    /// `GET path` on 127.0.0.1:`port` over a plain socket: the status line and the body.
    static func get(port: Int, path: String = "/metrics") throws -> (status: String, body: String) {
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n"
        let (reply, closed) = try RawSocket.exchange(port: port, bytes: Array(request.utf8))
        let text = String(decoding: reply, as: UTF8.self)
        guard closed, let split = text.range(of: "\r\n\r\n") else {
            throw NodeProcessError(message: "no whole HTTP response from port \(port): \(text)")
        }
        return (String(text[..<split.lowerBound].split(separator: "\r\n").first ?? ""), String(text[split.upperBound...]))
    }

    static func value(_ text: String, _ series: String) -> Double? { NodeMetricsTests.value(text, series) }

    static func scrape(_ node: NodeProcess) throws -> String {
        let address = try #require(node.metricsAddress, "no metrics line in the log:\n\(node.log())")
        let port = try #require(Int(address.split(separator: ":").last ?? ""))
        let (status, body) = try get(port: port)
        #expect(status == "HTTP/1.1 200 OK")
        return body
    }

    @Test func aScrapeShowsWritesPeersAndTraffic() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-metrics")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--metrics", "127.0.0.1:0"])
        for i in 0..<3 {
            let insert = try a.exec("INSERT INTO cars DOCUMENTS (:d)", args: "{\"d\": {\"_id\": \"car-\(i)\"}}")
            #expect(insert.status == 0, "\(insert.stderr)")
        }
        let b = try NodeProcess(
            name: "beta", dataDirectory: dirs.path + "/b",
            extra: ["--peer", a.address, "--subscribe", "SELECT * FROM cars", "--metrics", "127.0.0.1:0", "--log-format", "json"])
        #expect(try eventually { try ProcessMeshTests.documents(b).count == 3 })
        let bSite = try #require(try b.status()["siteID"] as? String)

        var text = ""
        #expect(try eventually {
            text = try Self.scrape(a)
            return Self.value(text, "shoal_peer_sent_deltas_total{peer_site=\"\(bSite)\"}") ?? 0 >= 3
        }, "\(text)")
        #expect(Self.value(text, "shoal_transactions_committed_total") ?? 0 >= 3)
        #expect(Self.value(text, "shoal_peers{state=\"connected\"}") ?? 0 >= 1)
        #expect(Self.value(text, "shoal_peer_sent_bytes_total{peer_site=\"\(bSite)\"}") ?? 0 > 0)
        #expect(Self.value(text, "shoal_peer_received_bytes_total{peer_site=\"\(bSite)\"}") ?? 0 > 0)
        #expect(Self.value(text, "shoal_commit_duration_seconds_count") ?? 0 >= 3)
        #expect(Self.value(text, "shoal_change_log_rows") ?? 0 >= 3)
        #expect(Self.value(text, "shoal_store_size_bytes") ?? 0 > 0)
        #expect(Self.value(text, "shoal_transactions_waiting") == 0)
        #expect(!text.contains("peer_site=\"0000000000000000\""), "the CLI's sessions are no peer's traffic")
        #expect(text.contains("# TYPE shoal_commit_duration_seconds histogram"))

        // The receiver counts what it applied, and times its commits of it.
        let received = try Self.scrape(b)
        #expect(Self.value(received, "shoal_transactions_applied_remote_total") ?? 0 >= 3, "\(received)")
        #expect(Self.value(received, "shoal_remote_apply_duration_seconds_count") ?? 0 >= 1)
        #expect(Self.value(received, "shoal_transactions_committed_total") == 0)

        // Only GET /metrics is served.
        let port = try #require(Int(a.metricsAddress?.split(separator: ":").last ?? ""))
        #expect(try Self.get(port: port, path: "/").status == "HTTP/1.1 404 Not Found")

        // --log-format json: every line beta wrote is one object with the fixed fields.
        let lines = b.log().split(separator: "\n")
        #expect(lines.count >= 2)
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["timestamp"] is String && object?["level"] is String && object?["message"] is String, "\(line)")
        }
        let ready = try #require(lines.first { $0.contains("ready to accept connections on") })
        let object = try #require(try JSONSerialization.jsonObject(with: Data(ready.utf8)) as? [String: Any])
        #expect(object["shoal.site"] as? String == bSite && object["label"] as? String == "shoal")
    }

    /// Reads until the peer closes; whether it did within `limit` seconds.
    static func closed(_ fd: Int32, within limit: Double) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 512)
        let started = Date()
        while Date().timeIntervalSince(started) < limit {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return true }
        }
        return false
    }

    /// Connections that never ask: the 17th is closed at once, the 16 others after
    /// the idle timeout, and a scrape is served again.
    @Test func silentConnectionsAreCappedAndTimedOut() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-metrics")
        defer { dirs.remove() }
        let node = try NodeProcess(
            name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--metrics", "127.0.0.1:0", "--idle-timeout", "3"])
        defer { node.stop() }
        let address = try #require(node.metricsAddress)
        let port = try #require(Int(address.split(separator: ":").last ?? ""))
        let opened = Date()
        let silent = try (0..<16).map { _ in try RawPeer.connect(port: port, receiveBuffer: nil) }
        defer { silent.forEach { close($0) } }
        usleep(300_000)
        let extra = try RawPeer.connect(port: port, receiveBuffer: nil)
        defer { close(extra) }
        #expect(Self.closed(extra, within: 2), "the 17th connection is closed at once")
        #expect(node.log().contains("refusing a metrics connection: 16 are open already"))
        var closedCount = 0
        for fd in silent where Self.closed(fd, within: 10) { closedCount += 1 }
        let seconds = Date().timeIntervalSince(opened)
        #expect(closedCount == 16, "every silent connection was closed by the 3 s idle timeout")
        #expect(seconds >= 2.5, "not before the idle timeout (\(seconds) s)")
        // The server frees a slot once it has seen its connection close, a moment after the
        // client has: a scrape in that moment is refused, as the 17th was; the next is served.
        #expect(eventually(5) { (try? Self.get(port: port))?.body.contains("shoal_") == true }, "served again")
    }

    @Test func anAddressInUseIsRefusedAtStart() throws {
        let dirs = TemporaryDirectory(prefix: "shoal-metrics")
        defer { dirs.remove() }
        let a = try NodeProcess(name: "alpha", dataDirectory: dirs.path + "/a", extra: ["--metrics", "127.0.0.1:0"])
        let taken = try #require(a.metricsAddress)
        let second = try ShoalBinary.run([
            "run", "--data", dirs.path + "/b", "--listen", "127.0.0.1:0", "--no-discovery", "--metrics", taken,
        ])
        #expect(second.status != 0)
        #expect(second.stderr.contains("cannot serve metrics on \(taken) (--metrics): Address already in use (errno 98)"), "\(second.stderr)")
        // The peer port taken: the same words, and the process ends.
        let third = try ShoalBinary.run(["run", "--data", dirs.path + "/c", "--listen", a.address, "--no-discovery"])
        #expect(third.status != 0)
        #expect(third.stderr.contains("cannot listen on \(a.address): Address already in use (errno 98)"), "\(third.stderr)")
    }
}
}
