package import ShoalCRDT

/// One register of a document as a store holds it: the field's name and its state.
package struct FieldRecord: Sendable, Hashable {
    package var name: String
    package var state: RegisterState

    package init(name: String, state: RegisterState) {
        self.name = name
        self.state = state
    }
}
