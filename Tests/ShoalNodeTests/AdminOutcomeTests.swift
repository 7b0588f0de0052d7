import Foundation
@testable import ShoalNode
import ShoalStorage
import ShoalSync
import ShoalWire
import SwiftProtobuf
import Testing

/// A write whose outcome the node cannot tell (a hub's COMMIT whose answer its database
/// connection lost, `ShoalError.Code.timedOut` in the store) crosses the admin protocol
/// as `OUTCOME_UNKNOWN` (PROTOCOL.md §11, code 15), and the client reports it as it
/// reports no answer at all, not as a refusal it could retry.
@Suite struct AdminOutcomeTests {
    @Test func anUnknownOutcomeCrossesTheWireAsItsOwnCode() throws {
        let response = AdminService.failure(ShoalError(.timedOut, "whether the write committed is unknown"))
        let bytes: [UInt8] = try response.wire(requestID: 7).serializedBytes()
        let back = AdminResponse(wire: try Shoal_V1_AdminResponse(serializedBytes: bytes))
        guard case .failure(let code, let message)? = back else {
            Issue.record("not a failure: \(String(describing: back))")
            return
        }
        #expect(code == .outcomeUnknown && code.name == "OUTCOME_UNKNOWN")
        #expect(message == "whether the write committed is unknown")
        #expect(Shoal_V1_Error.with { $0.code = code.wire }.code.rawValue == 15)

        #expect(AdminClient.refusal(code, message).code == .timedOut)
        #expect(AdminClient.refusal(.executionFailed, message).code == .requestFailed)
        // Every other store failure stays a refusal.
        guard case .failure(.executionFailed, _) = AdminService.failure(ShoalError(.database, "rolled back")) else {
            Issue.record("a database error is EXECUTION_FAILED")
            return
        }
    }

    /// Code 15 on the wire, whoever wrote it, is read as `OUTCOME_UNKNOWN`; a client that
    /// predates it reads a code it does not know as `unrecognized`, which it reports as a
    /// refusal with the node's message (PROTOCOL.md §13).
    @Test func codeFifteenIsReadAsTheUnknownOutcome() throws {
        var error = Shoal_V1_Error()
        error.code = .UNRECOGNIZED(15)
        let bytes: [UInt8] = try error.serializedBytes()
        #expect(bytes == [0x08, 15], "field 1, varint 15")
        #expect(SyncError.Code(wire: try Shoal_V1_Error(serializedBytes: bytes).code) == .outcomeUnknown)
        #expect(AdminClient.refusal(.unrecognized(15), "m") == ShoalError(.requestFailed, "m"))
    }
}
