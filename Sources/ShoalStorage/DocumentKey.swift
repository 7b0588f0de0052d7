public import ShoalCRDT

/// How a document's `_id` becomes its key: the canonical JSON of the value, so
/// string, number and object IDs never collide and compare byte for byte.
public enum DocumentKey {
    public static func make(_ id: Value) -> String { id.canonicalJSON }
}
