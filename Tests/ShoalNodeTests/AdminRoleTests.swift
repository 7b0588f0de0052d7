import Foundation
import ShoalCRDT
import Shoal
@testable import ShoalNode
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// What an admin client may do under each role its certificate gives it (the
/// permissions file's `admin`), on the node's own request handler.
@Suite struct AdminRoleTests {
    /// The answers `role` gets to `requests`, one each, on one connection.
    static func answers(_ role: PeerRights.AdminRole, _ requests: [AdminRequest]) async throws -> [AdminResponse] {
        let dir = TemporaryDirectory(prefix: "shoal-roles")
        defer { dir.remove() }
        let node = try ShoalNode(
            configuration: NodeConfiguration(dataDirectory: dir.path, listen: HostAndPort(host: "127.0.0.1", port: 0), discovery: false))
        let answers = Locked<[AdminResponse]>([])
        try await AdminService(node: node).serve(client: "test", role: role) { connection in
            for request in requests {
                try await connection.handle(request, deadline: nil) { response in answers.withLock { $0.append(response) } }
            }
        }
        return answers.withLock { $0 }
    }

    static func exec(_ text: String) -> AdminRequest { .exec(statements: text, argumentsJSON: "", hint: nil, readOnly: false) }

    /// The message of a refusal for want of a role: a failure with PERMISSION_DENIED.
    static func refusal(_ response: AdminResponse) -> String? {
        guard case .failure(let code, let message) = response else { return nil }
        #expect(code == .permissionDenied, "\(message)")
        return message
    }

    @Test func aReadOnlyClientReadsButCannotWrite() async throws {
        let answers = try await Self.answers(
            .read,
            [
                Self.exec("SELECT * FROM cars"), Self.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})"),
                .begin(hint: nil, readOnly: false), .compact(vacuum: false), .status(digests: false),
            ])
        #expect(answers.count == 5)
        #expect(Self.refusal(answers[0]) == nil)
        #expect(Self.refusal(answers[1])?.contains("admin role 'read'") == true)
        #expect(Self.refusal(answers[1])?.contains("INSERT on cars needs 'write'") == true)
        #expect(Self.refusal(answers[2])?.contains("needs 'write'") == true)
        #expect(Self.refusal(answers[3])?.contains("needs 'operate'") == true)
        #expect(Self.refusal(answers[4]) == nil)
    }

    @Test func aWriterWritesButCannotOperate() async throws {
        let answers = try await Self.answers(
            .write,
            [
                Self.exec("INSERT INTO cars DOCUMENTS ({'_id': 'a'})"), Self.exec("ALTER SYSTEM SET document_size_soft_limit_bytes = 1000"),
                .subscribe(query: "SELECT * FROM cars", argumentsJSON: ""), Self.exec("SELECT * FROM cars"),
            ])
        #expect(Self.refusal(answers[0]) == nil)
        #expect(Self.refusal(answers[1])?.contains("ALTER SYSTEM needs 'operate'") == true)
        #expect(Self.refusal(answers[2])?.contains("needs 'operate'") == true)
        guard case .exec(let result) = answers[3] else {
            Issue.record("not an exec result: \(answers[3])")
            return
        }
        #expect(result.itemsJSON.count == 1)
    }

    @Test func aClientWithNoRoleMayDoNothing() async throws {
        let answers = try await Self.answers(.none, [.status(digests: false), Self.exec("SELECT * FROM cars")])
        #expect(answers.compactMap(Self.refusal).count == 2)
        #expect(Self.refusal(answers[0])?.contains("'none'") == true)
    }
}
