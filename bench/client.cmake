# bench_client: the client's per-call protocol work (encode, decode and check, classify), and the
# server's (strict decode, Service::handle) for comparison.
hf3fs_meta_add_bench(bench_client ${CMAKE_CURRENT_LIST_DIR}/bench_client.cpp)
target_link_libraries(bench_client PRIVATE hf3fs_meta::service)
