import ShoalCRDT
import ShoalSync
import Testing

/// Which peer a transaction came from, so it is not echoed back to it.
struct DeliveryLedgerTests {
    static func id(_ n: UInt64) -> TransactionID { TransactionID(origin: SiteID(1), sequence: n) }

    @Test func aTransactionFromOnePeerHasThatSoleSource() {
        var ledger = DeliveryLedger()
        ledger.record(Self.id(1), from: SiteID(7))
        #expect(ledger.soleSource(of: Self.id(1)) == nil, "not yet committed: the node may hold more of it")
        ledger.committed([Self.id(1)], firstHeld: [Self.id(1)])
        ledger.record(Self.id(1), from: SiteID(7))
        ledger.committed([Self.id(1)], firstHeld: [])
        #expect(ledger.soleSource(of: Self.id(1)) == SiteID(7), "a later piece held in part before is still from the one peer")
        ledger.record(Self.id(1), from: SiteID(8))
        #expect(ledger.soleSource(of: Self.id(1)) == nil, "delivered by two peers: sent to both")
        #expect(ledger.soleSource(of: Self.id(2)) == nil, "never received: a local or forgotten one is sent")
    }

    /// Deltas held before the first delivery the ledger saw (an earlier life of the
    /// process) may be ones the peer lacks: it is one source among others.
    @Test func aTransactionHeldInPartBeforeItsFirstDeliveryHereHasNoSoleSource() {
        var ledger = DeliveryLedger()
        ledger.record(Self.id(1), from: SiteID(7))
        ledger.record(Self.id(2), from: SiteID(7))
        ledger.committed([Self.id(1), Self.id(2)], firstHeld: [Self.id(2)])
        #expect(ledger.soleSource(of: Self.id(1)) == nil)
        #expect(ledger.soleSource(of: Self.id(2)) == SiteID(7))
        ledger.record(Self.id(1), from: SiteID(7))
        ledger.committed([Self.id(1)], firstHeld: [Self.id(1)])
        #expect(ledger.soleSource(of: Self.id(1)) == nil, "decided at its first commit")
    }

    @Test func theOldestAreForgottenPastTheCapacity() {
        var ledger = DeliveryLedger(capacity: 3)
        for n in UInt64(1)...10 {
            ledger.record(Self.id(n), from: SiteID(7))
            ledger.committed([Self.id(n)], firstHeld: [Self.id(n)])
        }
        #expect((UInt64(1)...7).allSatisfy { ledger.soleSource(of: Self.id($0)) == nil })
        #expect((UInt64(8)...10).allSatisfy { ledger.soleSource(of: Self.id($0)) == SiteID(7) })
    }
}
