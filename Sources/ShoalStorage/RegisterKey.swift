package import ShoalCRDT

/// A document's key compared byte by byte, as the stores' tables compare it: Swift's
/// `==` on strings (and so on `DocumentRef`) takes canonically equivalent keys as one,
/// where the tables hold two documents.
package struct DocumentBytes: Hashable, Sendable {
    package let collection: [UInt8]
    package let id: [UInt8]

    package init(_ document: DocumentRef) {
        collection = Array(document.collection.utf8)
        id = Array(document.id.utf8)
    }
}

/// A register's key compared byte by byte (`DocumentBytes`, and the name's bytes).
package struct RegisterKey: Hashable, Sendable {
    package let document: DocumentBytes
    package let name: [UInt8]

    package init(_ document: DocumentRef, _ name: String) {
        self.document = DocumentBytes(document)
        self.name = Array(name.utf8)
    }

    package init(_ collection: String, _ document: String, _ name: String) {
        self.init(DocumentRef(collection: collection, id: document), name)
    }
}
