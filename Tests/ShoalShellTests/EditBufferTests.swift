import ShoalShell
import Testing

@Suite struct EditBufferTests {
    @Test func insertsAtTheCursorAndMovesWithinTheLine() {
        var buffer = EditBuffer()
        buffer.insert("SELCT")
        buffer.moveLeft()
        buffer.moveLeft()
        buffer.insert("E")
        #expect(buffer.text == "SELECT" && buffer.cursor == 4)
        buffer.moveHome()
        buffer.moveLeft()
        #expect(buffer.cursor == 0)
        buffer.moveEnd()
        buffer.moveRight()
        #expect(buffer.cursor == 6)
    }

    @Test func deletesBackwardAndForwardAtTheEdges() {
        var buffer = EditBuffer("ab")
        buffer.deleteForward()
        #expect(buffer.text == "ab")
        buffer.deleteBackward()
        #expect(buffer.text == "a" && buffer.cursor == 1)
        buffer.moveHome()
        buffer.deleteBackward()
        #expect(buffer.text == "a")
        buffer.deleteForward()
        #expect(buffer.text == "" && buffer.cursor == 0)
    }

    @Test func cutsToTheEndTheStartAndTheWordBefore() {
        var buffer = EditBuffer("SELECT * FROM cars")
        buffer.deleteWordBackward()
        #expect(buffer.text == "SELECT * FROM ")
        buffer.deleteWordBackward()
        #expect(buffer.text == "SELECT * ")
        buffer.moveHome()
        buffer.moveRight()
        buffer.killToEnd()
        #expect(buffer.text == "S" && buffer.cursor == 1)
        buffer.insert("ELECT")
        buffer.moveLeft()
        buffer.killToStart()
        #expect(buffer.text == "T" && buffer.cursor == 0)
    }

    @Test func keepsMultiByteCharactersWhole() {
        var buffer = EditBuffer("café")
        buffer.deleteBackward()
        #expect(buffer.text == "caf")
        buffer.insert("é🚗")
        buffer.moveLeft()
        buffer.deleteForward()
        #expect(buffer.text == "café" && buffer.cursor == 4)
    }
}
