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

    /// A client that predates the code reads it as an unknown one, with the message.
    @Test func anOlderClientReadsTheCodeAsUnknown() throws {
        var error = Shoal_V1_Error()
        error.code = .UNRECOGNIZED(15)
        let bytes: [UInt8] = try error.serializedBytes()
        let read = try Shoal_V1_Error(serializedBytes: bytes)
        #expect(SyncError.Code(wire: read.code) == .outcomeUnknown)
        #expect(SyncError.Code(wire: .UNRECOGNIZED(16)) == .unrecognized(16))
    }
}
