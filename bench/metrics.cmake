# The request path's accounting: the server's sharded counters beside prometheus-cpp's (metrics.cpp says
# why the request path keeps the shards).
hf3fs_meta_add_bench(bench_metrics ${CMAKE_CURRENT_LIST_DIR}/bench_metrics.cpp)
target_link_libraries(bench_metrics PRIVATE hf3fs_meta_server_core)
