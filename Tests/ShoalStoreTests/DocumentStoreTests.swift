import Foundation
import ShoalCRDT
import ShoalQuery
import ShoalStore
import ShoalStorage
import ShoalTesting
import Testing

@Suite struct DocumentStoreTests {
    static func withStore<T>(_ body: (DocumentStore, String) async throws -> T) async throws -> T {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let store = try DocumentStore(directory: dir.path)
        defer { store.close() }
        return try await body(store, dir.path)
    }

    @Test func insertThenSelectByIDAndByField() async throws {
        try await Self.withStore { store, _ in
            let r = try await store.execute(
                "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue', 'n': 1}), ({'_id': 'b', 'color': 'red', 'n': 2})")
            #expect(r.mutatedDocumentIDs == ["a", "b"])
            #expect(r.transactionID?.origin == store.siteID)
            #expect(r.transactionID?.sequence == 1)
            #expect(try await store.execute("SELECT * FROM cars WHERE _id = 'b'").items == [["_id": "b", "color": "red", "n": 2]])
            #expect(try await store.execute("SELECT * FROM cars WHERE color = :c", arguments: ["c": "blue"]).items.count == 1)
            #expect(try await store.execute("SELECT * FROM cars").items.count == 2)
            #expect(try await store.execute("SELECT * FROM boats").items.isEmpty)
        }
    }

    @Test func insertFromAParameterAndGeneratedIDs() async throws {
        try await Self.withStore { store, _ in
            let r = try await store.execute("INSERT INTO notes DOCUMENTS (:doc)", arguments: ["doc": ["text": "hi"]])
            let id = try #require(r.mutatedDocumentIDs.first?.stringValue)
            #expect(id.count == 32)
            #expect(try await store.execute("SELECT * FROM notes").items == [["_id": .string(id), "text": "hi"]])
            let composite = try await store.execute("INSERT INTO notes DOCUMENTS ({'_id': {'a': 1, 'b': 'x'}, 'v': 1})")
            #expect(composite.mutatedDocumentIDs == [["a": 1, "b": "x"]])
            #expect(try await store.execute("SELECT * FROM notes WHERE _id = :id", arguments: ["id": ["b": "x", "a": 1]]).items.count == 1)
        }
    }

    @Test func conflictPolicies() async throws {
        try await Self.withStore { store, _ in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 1, 'b': 1})")
            await #expect {
                try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 2})")
            } throws: { error in
                (error as? ShoalError)?.code == .documentExists
            }
            let nothing = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 2}) ON ID CONFLICT DO NOTHING")
            #expect(nothing.mutatedDocumentIDs.isEmpty && nothing.transactionID == nil)
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 3}) ON ID CONFLICT DO UPDATE")
            #expect(try await store.execute("SELECT * FROM c").items == [["_id": "x", "a": 3, "b": 1]])
            let same = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 3, 'b': 1}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
            #expect(same.transactionID == nil, "no field differs, nothing is written")
            let before = try await store.lastSequence()
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'x', 'a': 3, 'b': 5}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
            #expect(try await store.lastSequence() == before + 1, "only b is written")
        }
    }

    @Test func updateReadsTheCurrentDocument() async throws {
        try await Self.withStore { store, _ in
            _ = try await store.execute("INSERT INTO acct DOCUMENTS ({'_id': 'a', 'balance': 10, 'owner': {'name': 'x'}})")
            let r = try await store.execute("UPDATE acct SET balance = balance - 7, owner.name = 'y' WHERE _id = 'a'")
            #expect(r.mutatedDocumentIDs == ["a"])
            #expect(try await store.execute("SELECT * FROM acct").items == [["_id": "a", "balance": 3, "owner": ["name": "y"]]])
            #expect(try await store.execute("UPDATE acct SET balance = 0 WHERE balance > 100").mutatedDocumentIDs.isEmpty)
        }
    }

    @Test func severalStatementsAreOneTransaction() async throws {
        try await Self.withStore { store, _ in
            let r = try await store.execute(
                "INSERT INTO c DOCUMENTS ({'_id': 'a', 'n': 1}); UPDATE c SET n = n + 1 WHERE _id = 'a'; SELECT * FROM c")
            #expect(r.items == [["_id": "a", "n": 2]])
            #expect(r.transactionID?.sequence == 1)
            // A failing statement rolls back the ones before it.
            await #expect(throws: ShoalError.self) {
                try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b'}); INSERT INTO c DOCUMENTS ({'_id': 'a'})")
            }
            #expect(try await store.execute("SELECT * FROM c WHERE _id = 'b'").items.isEmpty)
            #expect(try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'z'})").transactionID?.sequence == 2)
        }
    }

    @Test func queryErrorsCarryTheirPosition() async throws {
        try await Self.withStore { store, _ in
            do {
                _ = try await store.execute("SELECT * FORM cars")
                Issue.record("expected an error")
            } catch let error as ShoalError {
                #expect(error.code == .invalidQuery)
                #expect(error.queryError?.position?.column == 10)
                #expect(error.message.contains("line 1, column 10"))
            }
            await #expect(throws: ShoalError.self) { try await store.execute("UPDATE c SET _id = 'q'") }
            await #expect(throws: ShoalError.self) { try await store.execute("INSERT INTO c DOCUMENTS (:d)", arguments: ["d": 5]) }
        }
    }

    @Test func theSiteIDAndDataSurviveReopening() async throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let first = try DocumentStore(directory: dir.path)
        _ = try await first.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
        let site = first.siteID
        first.close()
        let second = try DocumentStore(directory: dir.path)
        defer { second.close() }
        #expect(second.siteID == site)
        #expect(try await second.execute("SELECT * FROM c").items == [["_id": "a"]])
        #expect(try await second.execute("INSERT INTO c DOCUMENTS ({'_id': 'b'})").transactionID?.sequence == 2)
    }
    /// A data directory emptied and filled from a copy of itself is a copy: the store
    /// takes a new site. ext4 gives the file copied into the deleted one's place the
    /// same inode number (`rm f; cp copy/f f`), so the device and inode alone took it
    /// for the original; its birth time tells them apart.
    @Test func aFileCopiedIntoTheOriginalsPlaceIsACopy() async throws {
        let dir = TemporaryDirectory()
        let aside = TemporaryDirectory()
        defer { dir.remove(); aside.remove() }
        let first = try DocumentStore(directory: dir.path)
        _ = try await first.execute("INSERT INTO c DOCUMENTS ({'_id': 'a'})")
        let site = first.siteID
        first.close()
        let path = dir.path + "/shoal.sqlite"
        let before = try #require(DocumentStore.fileIdentity(path))
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        for name in names { try FileManager.default.copyItem(atPath: dir.path + "/" + name, toPath: aside.path + "/" + name) }
        for name in names {
            try FileManager.default.removeItem(atPath: dir.path + "/" + name)
            try FileManager.default.copyItem(atPath: aside.path + "/" + name, toPath: dir.path + "/" + name)
        }
        let after = try #require(DocumentStore.fileIdentity(path))
        if before.born == nil || after.born == nil {
            print("DocumentStoreTests: this file system keeps no birth time; the copy is told by inode only")
        }
        let second = try DocumentStore(directory: dir.path)
        defer { second.close() }
        if before.inode != after.inode || before.born != after.born {
            #expect(second.siteID != site, "a copy takes a new site")
        } else {
            #expect(second.siteID == site)
        }
        #expect(try await second.execute("SELECT * FROM c").items == [["_id": "a"]])
    }
}
