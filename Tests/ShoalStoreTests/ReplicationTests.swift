import GRDB
import GRDBSQLite
import ShoalCRDT
@testable import ShoalStore
import ShoalStorage
import ShoalSync
import ShoalTesting
import Testing

/// Applying the same remote deltas in any order, duplicated, converges.
@Suite struct ReplicationTests {
    static func everything() throws -> SubscriptionSet {
        var set = SubscriptionSet()
        try set.add(query: "SELECT * FROM c")
        return set
    }

    /// Deltas as a writer's change log holds them, one piece per transaction.
    static func transactions(in store: DocumentStore) async throws -> [TransactionPiece] {
        try await store.changes(after: 0, limit: 100_000, subscriptions: everything()).pieces
    }

    @Test func lastWriterWinsRegardlessOfDeliveryOrder() async throws {
        let dirs = (0..<3).map { _ in TemporaryDirectory() }
        defer { dirs.forEach { $0.remove() } }
        let writers = try dirs.map { try DocumentStore(directory: $0.path) }
        defer { writers.forEach { $0.close() } }
        var rng = SystemRandomNumberGenerator()
        // Concurrent writers edit overlapping fields of overlapping documents.
        for round in 0..<8 {
            for (w, store) in writers.enumerated() {
                let doc = "d\(Int.random(in: 0..<4, using: &rng))"
                _ = try await store.execute(
                    "INSERT INTO c DOCUMENTS ({'_id': :id, 'f\(round % 3)': :v, 'w': :w}) ON ID CONFLICT DO UPDATE",
                    arguments: ["id": .string(doc), "v": .int(Int64(round)), "w": .int(Int64(w))])
            }
        }
        var all: [TransactionPiece] = []
        for w in writers { all += try await Self.transactions(in: w) }
        #expect(all.count == 24)

        var results: [[String]] = []
        for trial in 0..<4 {
            let dir = TemporaryDirectory()
            defer { dir.remove() }
            let replica = try DocumentStore(directory: dir.path)
            defer { replica.close() }
            var order = all.shuffled(using: &rng)
            if trial % 2 == 1 { order += all.shuffled(using: &rng).prefix(10) }  // duplicates
            // Delivered in batches of random size, each one SQLite transaction.
            var i = 0
            while i < order.count {
                let n = Int.random(in: 1...5, using: &rng)
                let batch = Array(order[i..<min(i + n, order.count)])
                _ = try await replica.applyRemote(batch, from: SiteID(99), subscriptionKey: "k", through: UInt64(i + n))
                i += n
            }
            let items = try await replica.execute("SELECT * FROM c ORDER BY _id").items.map(\.canonicalJSON)
            results.append(items)
        }
        #expect(results[0].count == Set(results[0]).count && !results[0].isEmpty)
        for r in results.dropFirst() { #expect(r == results[0]) }
    }

    @Test func everyPieceIsLoggedOnceForRelayWinnerOrNot() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), relay = try DocumentStore(directory: b.path)
        defer { writer.close(); relay.close() }
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})")
        _ = try await writer.execute("UPDATE c SET v = 2 WHERE _id = 'x'")
        let txns = try await Self.transactions(in: writer)
        #expect(txns.map(\.id.sequence) == [1, 2] && txns.allSatisfy(\.isLast))
        // The later write arrives first; the earlier one loses LWW but is still logged, once.
        let first = try await relay.applyRemote([txns[1]], from: writer.siteID, subscriptionKey: "k", through: 3)
        #expect(first.logged == 1 && first.won == 1)
        let second = try await relay.applyRemote([txns[0]], from: writer.siteID, subscriptionKey: "k", through: 3)
        #expect(second.logged == 2 && second.won == 1, "_id wins, v = 1 loses to v = 2 but is logged")
        let again = try await relay.applyRemote(txns, from: writer.siteID, subscriptionKey: "k", through: 3)
        #expect(again.logged == 0 && again.won == 0, "a piece already held is skipped")
        #expect(try await relay.execute("SELECT * FROM c").items == [["_id": "x", "v": 2]])
        // The relay's log holds the writer's deltas under the writer's transaction IDs, whole.
        let relayed = try await Self.transactions(in: relay)
        #expect(Set(relayed.map(\.id)) == Set(txns.map(\.id)))
        #expect(relayed.first { $0.id == txns[0].id }?.deltas.map(\.valueJSON).sorted() == txns[0].deltas.map(\.valueJSON).sorted())
        #expect(try await relay.cursor(peer: writer.siteID, subscriptionKey: "k") == 3)
        #expect(try await relay.cursor(peer: writer.siteID, subscriptionKey: "other") == 0)
        // A write after the received one wins locally: the clock moved past it.
        _ = try await relay.execute("UPDATE c SET v = 3 WHERE _id = 'x'")
        #expect(try await relay.execute("SELECT * FROM c").items == [["_id": "x", "v": 3]])
    }

    /// EVICT forgets every cursor so that peers send everything again. A batch of a
    /// stream read before it, committed after it, records no cursor: the node would
    /// resume past what it evicted (or, restored, past its own transactions) without
    /// asking for it again.
    @Test func aBatchOfAStreamReadBeforeCursorsWereForgottenRecordsNone() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), store = try DocumentStore(directory: b.path)
        defer { writer.close(); store.close() }
        let peer = writer.siteID
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})")
        try await store.applyRemote(try await Self.transactions(in: writer), from: peer)
        let before = try await store.resumePoint(peer: peer, subscriptionKey: "k")
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: "k", through: 10, epoch: before.epoch)
        }
        #expect(try await store.resumePoint(peer: peer, subscriptionKey: "k") == ResumePoint(through: 10, epoch: before.epoch))
        _ = try await store.execute("EVICT FROM c")
        let after = try await store.resumePoint(peer: peer, subscriptionKey: "k")
        #expect(after.through == 0 && after.epoch == before.epoch + 1)
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: "k", through: 292, epoch: before.epoch)
        }
        #expect(try await store.resumePoint(peer: peer, subscriptionKey: "k").through == 0, "a stale stream's batch")
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: "k", through: 5, epoch: after.epoch)
        }
        #expect(try await store.resumePoint(peer: peer, subscriptionKey: "k").through == 5)
    }

    /// Recording what an applied transaction leaves out now changes its `rest` alone:
    /// the commit tells observers of no transaction applied, where marking it applied
    /// named it among the commit's.
    @Test func recordingARestTellsObserversOfNothing() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), store = try DocumentStore(directory: b.path)
        defer { writer.close(); store.close() }
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})")
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'y', 'v': 2})")
        let pieces = try await Self.transactions(in: writer)
        try await store.applyRemote(pieces, from: writer.siteID)
        let ids = pieces.map(\.id)
        try #require(ids.count == 2)
        var commits = store.commits.updates().makeAsyncIterator()
        let left = [Verdict(collection: "d", coverage: .unknown)]
        _ = try await store.writeInbound { inbound async throws(ShoalError) in try await inbound.recordRest(ids[0], rest: left) }
        #expect(try await store.storedTransactions([ids[0]])[ids[0]]?.rest == left)
        _ = try await store.writeInbound { inbound async throws(ShoalError) in try await inbound.markApplied(ids[1], rest: []) }
        let first = await commits.next()
        #expect(first?.transactions == [ids[1]], "the first commit heard of is the one that marked the second applied")
    }

    /// A narrower set resumes from the cursor of a set holding all its entries (what
    /// that cursor says holds for it), never from one of a set it is not part of, and
    /// from its own cursor when that is higher.
    @Test func aNarrowerSetResumesFromTheCursorOfAWiderOne() async throws {
        let a = TemporaryDirectory()
        defer { a.remove() }
        let store = try DocumentStore(directory: a.path)
        defer { store.close() }
        let peer = SiteID(7)
        func set(_ queries: String...) throws -> SubscriptionSet {
            var set = SubscriptionSet()
            for query in queries { try set.add(query: query) }
            return set
        }
        let cars = "SELECT * FROM cars", boats = "SELECT * FROM boats", trucks = "SELECT * FROM trucks"
        let wide = try set(boats, cars), narrow = try set(boats), other = try set(boats, trucks)
        let start = try await store.resumePoint(peer: peer, subscriptions: wide)
        #expect(start.through == 0)
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: wide.key, through: 40, epoch: start.epoch)
        }
        #expect(try await store.resumePoint(peer: peer, subscriptions: narrow).through == 40)
        #expect(try await store.resumePoint(peer: peer, subscriptions: other).through == 0, "trucks were never asked for")
        #expect(try await store.resumePoint(peer: SiteID(8), subscriptions: narrow).through == 0, "another peer's log")
        _ = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: narrow.key, through: 55, epoch: start.epoch)
        }
        #expect(try await store.resumePoint(peer: peer, subscriptions: narrow).through == 55)
        #expect(try await store.resumePoint(peer: peer, subscriptions: wide).through == 40, "never from a narrower set")
    }

    /// Every inbound commit that records a cursor reads the cursor epoch first: that
    /// read is the writer connection's cached statement, not one compiled per commit.
    @Test func recordingACursorReadsTheEpochThroughACachedStatement() async throws {
        let a = TemporaryDirectory()
        defer { a.remove() }
        let store = try DocumentStore(directory: a.path)
        defer { store.close() }
        let peer = SiteID(7)
        let epoch = try await store.resumePoint(peer: peer, subscriptionKey: "k").epoch
        let (prepared, _) = try await store.writeInbound { writer async throws(ShoalError) in
            try await writer.recordCursor(peer: peer, subscriptionKey: "k", through: 1, epoch: epoch)
            try await writer.recordCursor(peer: peer, subscriptionKey: "k", through: 2, epoch: epoch)
            // The statements the connection holds prepared now, by their SQL.
            guard let writer = writer as? InboundWriter else { return [String]() }
            return try await writer.access { db in
                var sql: [String] = []
                var statement = sqlite3_next_stmt(db.sqliteConnection, nil)
                while let current = statement {
                    sql.append(String(cString: sqlite3_sql(current)))
                    statement = sqlite3_next_stmt(db.sqliteConnection, current)
                }
                return sql
            }
        }
        #expect(prepared.filter { $0 == "SELECT value FROM shoal_meta WHERE key = ?" }.count == 1)
        #expect(try await store.resumePoint(peer: peer, subscriptionKey: "k").through == 2)
    }

    /// A peer asks about a collection of a transaction this node holds no row of (a
    /// narrow relay holding only part of it): the answer is one last piece with the
    /// manifest and verdicts and no deltas, never a crash on an empty run of rows.
    @Test func askingAboutACollectionWithNoRowsHereGetsVerdictsOnly() async throws {
        let a = TemporaryDirectory()
        defer { a.remove() }
        let store = try DocumentStore(directory: a.path)
        defer { store.close() }
        try await store.transaction { tx -> Void in
            _ = try await tx.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})")
            _ = try await tx.execute("INSERT INTO d DOCUMENTS ({'_id': 'y', 'v': 2})")
        }
        var wide = SubscriptionSet()
        try wide.add(query: "SELECT * FROM c")
        try wide.add(query: "SELECT * FROM e")
        let id = try #require(try await Self.transactions(in: store).first?.id)
        let answer = try await store.transactionPieces(id, subscriptions: wide, collections: ["e"])
        #expect(answer.count == 1)
        let piece = try #require(answer.first)
        #expect(piece.isLast && piece.deltas.isEmpty && piece.documentCount == 2)
        #expect(Set(piece.collections.map(\.collection)) == ["c", "d"])
        // It never held them and recorded nothing of them: it cannot vouch.
        #expect(!piece.verdicts.isEmpty && piece.verdicts.allSatisfy { $0.coverage == .unknown })
        let whole = try await store.transactionPieces(id, subscriptions: wide, collections: ["c"])
        #expect(whole.flatMap(\.deltas).allSatisfy { $0.collection == "c" } && !whole.flatMap(\.deltas).isEmpty)
    }

    /// A transaction compaction took out of the log is answered, when a peer asks about
    /// it, with the transactions that superseded it: what the peer must apply to
    /// complete it (PROTOCOL.md §8.8), never a verdict that vouches for nothing.
    @Test func aCompactedTransactionIsAnsweredWithWhatSupersededIt() async throws {
        let a = TemporaryDirectory()
        defer { a.remove() }
        let store = try DocumentStore(directory: a.path)
        defer { store.close() }
        let first = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1})").transactionID!
        let second = try await store.execute("DELETE FROM c WHERE _id = 'x'").transactionID!
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'y'})")
        let report = try await store.compactChangeLog(through: try await store.lastSequence())
        #expect(report.transactionsRemoved == 1)
        let answer = try await store.transactionPieces(first, subscriptions: Self.everything(), collections: ["c"])
        let piece = try #require(answer.first)
        #expect(answer.count == 1 && piece.isLast && piece.deltas.isEmpty)
        #expect(piece.verdicts.contains(Verdict(collection: "c", coverage: .superseded([second]))), "\(piece.verdicts)")
        #expect(piece.verdicts.contains { if case .notCovered = $0.coverage { true } else { false } })
    }

    /// A relay passes on what a whole-collection subscriber wants even of a document it
    /// holds no body of: one created and deleted in the same transaction leaves only
    /// registers on the relay, and its deltas travel on, tombstone and all, rather
    /// than a verdict that the subscriber does not want them.
    @Test func aDocumentCreatedAndDeletedInOneTransactionIsRelayed() async throws {
        let dirs = (0..<3).map { _ in TemporaryDirectory() }
        defer { dirs.forEach { $0.remove() } }
        let stores = try dirs.map { try DocumentStore(directory: $0.path) }
        defer { stores.forEach { $0.close() } }
        let (writer, relay, last) = (stores[0], stores[1], stores[2])
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'y', 'v': 1})")
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1}); DELETE FROM c WHERE _id = 'x'")
        let txns = try await Self.transactions(in: writer)
        try #require(txns.count == 2)
        _ = try await relay.applyRemote(txns, from: writer.siteID, subscriptionKey: "k", through: 2)
        let relayed = try await Self.transactions(in: relay)
        let created = try #require(relayed.first { $0.id == txns[1].id })
        #expect(created.deltas.count == txns[1].deltas.count, "every delta of x goes on: \(created.deltas)")
        #expect(created.verdicts.allSatisfy { if case .notCovered = $0.coverage { true } else { false } })
        _ = try await last.applyRemote(relayed, from: relay.siteID, subscriptionKey: "k", through: 2)
        for store in [relay, last] {
            #expect(try await store.execute("SELECT * FROM c ORDER BY _id").items == [["_id": "y", "v": 1]])
            let x = try await store.execute("SELECT * FROM c WHERE _id = 'x'").items
            #expect(x.isEmpty)
        }
        // The last store logged every delta of x, tombstone included, so it can pass them on in turn.
        #expect(try await Self.transactions(in: last).first { $0.id == txns[1].id }?.deltas.count == txns[1].deltas.count)
    }

    /// EVICT never takes rows out of the log: a page still sends an evicted document's
    /// deltas, to a whole-collection subscriber and to a filtered one alike (it cannot
    /// be judged, so it is sent), with no verdict but the usual `notCovered`.
    @Test func anEvictedDocumentIsStillSentFromTheLog() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'v': 1}), ({'_id': 'y', 'v': 2})")
        store.peerHoldings.note(SiteID(0xB), through: try await store.lastSequence(), subscriptions: try TransactionTests.everything("c"))
        #expect(try await store.execute("EVICT FROM c WHERE _id = 'x'").mutatedDocumentIDs == ["x"])
        let piece = try #require(try await Self.transactions(in: store).first)
        #expect(Set(piece.deltas.map(\.documentID)) == ["\"x\"", "\"y\""])
        #expect(!piece.verdicts.contains { $0.coverage == .unknown })
        var filtered = SubscriptionSet()
        try filtered.add(query: "SELECT * FROM c WHERE v = 2")
        let page = try await store.changes(after: 0, limit: 100, subscriptions: filtered)
        #expect(Set(page.pieces.flatMap(\.deltas).map(\.documentID)) == ["\"x\"", "\"y\""], "x cannot be judged, so it goes")
    }

    /// A document holding a write of this node's own that no peer has acknowledged is
    /// kept by EVICT: nothing else would give it back.
    @Test func evictKeepsOwnWritesNoPeerHasAcknowledged() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'held', 'v': 1})")
        let held = try await store.lastSequence()
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'mine', 'v': 1})")
        // A peer acknowledged the log through the first insert, under a subscription to c.
        store.peerHoldings.note(SiteID(0xB), through: held, subscriptions: try TransactionTests.everything("c"))
        // Another acknowledged all of it, but subscribes to something else.
        var boats = SubscriptionSet()
        try boats.add(query: "SELECT * FROM boats")
        store.peerHoldings.note(SiteID(0xC), through: try await store.lastSequence(), subscriptions: boats)
        #expect(try await store.execute("EVICT FROM c").mutatedDocumentIDs == ["held"])
        #expect(try await store.execute("SELECT _id FROM c").items == [["_id": "mine"]])
        // An update of the held document makes it this node's alone again.
        store.peerHoldings.note(SiteID(0xB), through: try await store.lastSequence(), subscriptions: try TransactionTests.everything("c"))
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'mine', 'v': 2}) ON ID CONFLICT DO UPDATE")
        #expect(try await store.execute("EVICT FROM c").mutatedDocumentIDs.isEmpty)
        store.peerHoldings.note(SiteID(0xB), through: try await store.lastSequence(), subscriptions: try TransactionTests.everything("c"))
        #expect(try await store.execute("EVICT FROM c").mutatedDocumentIDs == ["mine"])
    }

    @Test func pagesSplitLargeTransactionsIntoPiecesWithAManifest() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        // Transaction 1: a (4 deltas), then enough blue documents (2 deltas each) to
        // fill its first log row and start a second.
        let blue = LogAppender.documentsPerRow
        let blues: [Value] = (0..<blue).map { ["_id": .string("z\($0)"), "k": "blue"] }
        _ = try await store.execute(
            "INSERT INTO c DOCUMENTS ({'_id': 'a', 'k': 'red', 'x': 1, 'y': 2}); INSERT INTO c DOCUMENTS (:blues)",
            arguments: ["blues": .array(blues)])
        _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'k': 'blue'})")
        _ = try await store.execute("INSERT INTO other DOCUMENTS ({'_id': 'a'})")
        var red = SubscriptionSet()
        try red.add(query: "SELECT * FROM c WHERE k = 'red'")
        // A page stretches past its limit to finish a transaction, up to 4 times the limit.
        let whole = try await store.changes(after: 0, limit: 100, subscriptions: red)
        #expect(whole.through == 2, "the two rows of transaction 1 fit in 4 times the limit")
        #expect(whole.pieces.count == 1 && whole.pieces.first?.isLast == true)
        let page = try await store.changes(after: 0, limit: 1, subscriptions: red)
        #expect(page.through == 1, "past 4 times the limit the page ends inside the transaction, after a whole row")
        let first = try #require(page.pieces.first)
        #expect(page.pieces.count == 1 && !first.isLast && first.deltas.count == 4)
        #expect(first.deltaCount == UInt32(4 + 2 * blue) && first.documentCount == UInt32(1 + blue))
        #expect(first.collections == [CollectionCount(collection: "c", documents: UInt32(1 + blue), deltas: UInt32(4 + 2 * blue))])
        #expect(first.documentDeltaCounts == [DocumentRef(collection: "c", id: "\"a\""): 4])
        #expect(first.verdicts.isEmpty, "verdicts come with the last piece")
        var continuing: Set<TransactionID> = [first.id]
        var through = page.through
        var pieces = page.pieces
        while true {
            let next = try await store.changes(after: through, limit: 1, subscriptions: red, continuing: continuing)
            guard next.through > through else { break }
            for piece in next.pieces { if piece.isLast { continuing.remove(piece.id) } else { continuing.insert(piece.id) } }
            pieces += next.pieces
            through = next.through
        }
        #expect(through == 4)
        #expect(pieces.map(\.id.sequence) == [1, 1], "b and the other collection are not sent; the last piece of 1 is")
        #expect(pieces.last?.isLast == true && pieces.last?.deltas.isEmpty == true, "the last blue one does not match: nothing to send with it")
        #expect(pieces.flatMap(\.deltas).map(\.documentID) == Array(repeating: "\"a\"", count: 4))
        #expect(pieces.last?.verdicts == [Verdict(collection: "c", coverage: .notCovered(red.filter))])
        #expect(red.key != SubscriptionSet().key)
        var invalid = SubscriptionSet()
        #expect(throws: ShoalError.self) { try invalid.add(query: "UPDATE c SET a = 1") }
        #expect(throws: ShoalError.self) { try invalid.add(query: "SELECT * FROM c LIMIT 3") }
    }

    /// A document that starts matching a filtered subscription arrives whole,
    /// not as just the field that made it match.
    @Test func aDocumentThatStartsMatchingIsSentWhole() async throws {
        let a = TemporaryDirectory(), b = TemporaryDirectory()
        defer { a.remove(); b.remove() }
        let writer = try DocumentStore(directory: a.path), receiver = try DocumentStore(directory: b.path)
        defer { writer.close(); receiver.close() }
        _ = try await writer.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'color': 'red', 'size': 3})")
        var green = SubscriptionSet()
        try green.add(query: "SELECT * FROM c WHERE color = 'green'")
        let before = try await writer.changes(after: 0, limit: 100, subscriptions: green)
        #expect(before.pieces.isEmpty)
        _ = try await writer.execute("UPDATE c SET color = 'green' WHERE _id = 'x'")
        let page = try await writer.changes(after: before.through, limit: 100, subscriptions: green)
        let piece = try #require(page.pieces.first)
        #expect(page.pieces.count == 1 && piece.deltas.map(\.field) == ["color"])
        #expect(Set(piece.context.map(\.field)) == ["_id", "size"], "the rest of the document comes as context")
        #expect(Set(piece.context.map(\.transaction.sequence)) == [1], "each field keeps the transaction that wrote it")
        _ = try await receiver.applyRemote(page.pieces, from: writer.siteID, subscriptionKey: green.key, through: page.through)
        #expect(try await receiver.execute("SELECT * FROM c").items == [["_id": "x", "color": "green", "size": 3]])
        // A write to a field the WHERE does not read sends only itself.
        _ = try await writer.execute("UPDATE c SET size = 4 WHERE _id = 'x'")
        let next = try await writer.changes(after: page.through, limit: 100, subscriptions: green)
        #expect(next.deltas.map(\.field) == ["size"] && next.pieces[0].context.isEmpty)
        // The peer's own writes are not echoed back to it.
        let echo = try await writer.changes(after: 0, limit: 100, subscriptions: Self.everything(), excludingOrigin: writer.siteID)
        #expect(echo.pieces.isEmpty && echo.through == next.through)
        // Nor are the transactions it names as skipped; the page still ends where the log does.
        let skipped = try await writer.changes(
            after: 0, limit: 100, subscriptions: Self.everything(), skipping: { $0.sequence == 2 })
        #expect(skipped.pieces.map(\.id.sequence) == [1, 3] && skipped.through == next.through)
    }
}
