import ShoalCRDT
package import ShoalStorage
import GRDB

extension DocumentStore {
    /// The subscriptions added at run time and not removed since.
    package func savedSubscriptions() async throws(ShoalError) -> [SavedSubscription] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT id, query, arguments FROM subscription ORDER BY id").map { row in
                let row = StoredRow(row, of: "subscription")
                let arguments = try Self.parseBody(row.value(Column("arguments"))).objectValue ?? [:]
                return SavedSubscription(id: try row.value(Column("id")), query: try row.value(Column("query")), arguments: arguments)
            }
        }
    }

    package func saveSubscription(_ subscription: SavedSubscription) async throws(ShoalError) {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO subscription (id, query, arguments) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
                arguments: [subscription.id, subscription.query, Value.object(subscription.arguments).canonicalJSON])
        }
    }

    /// Removes a saved subscription; returns whether there was one.
    @discardableResult
    package func removeSavedSubscription(id: String) async throws(ShoalError) -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM subscription WHERE id = ?", arguments: [id])
            return db.changesCount > 0
        }
    }
}
