// The target that builds the precompiled GoogleTest/GoogleMock header the test binaries reuse
// (tests/CMakeLists.txt); CMake builds a target's header only with a source of its own.
