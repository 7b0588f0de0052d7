import FuzzDriver
import FuzzSupport

/// One input, through `Harness.permissions`.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    Harness.permissions(data.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? [])
    return 0
}

/// The program's entry point: SwiftPM aliases main to TARGET_main, so it hands
/// libFuzzer's driver the function above itself.
@_cdecl("FuzzPermissions_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv, fuzzOne)
}
