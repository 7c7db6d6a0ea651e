# bench_roundtrip: one request's round trip over loopback, the SDK beside a bare libcurl call.
# Needs live servers (bench/run starts them); never run by tests.
hf3fs_meta_add_bench(bench_roundtrip ${CMAKE_CURRENT_LIST_DIR}/bench_roundtrip.cpp)
target_link_libraries(bench_roundtrip PRIVATE hf3fs_meta::client CURL::libcurl)
