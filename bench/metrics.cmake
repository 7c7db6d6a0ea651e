# The request path's accounting: the server's sharded counters beside prometheus-cpp's (metrics.cpp says
# which it keeps, and why).
find_package(prometheus-cpp CONFIG REQUIRED)
hf3fs_meta_add_bench(bench_metrics ${CMAKE_CURRENT_LIST_DIR}/bench_metrics.cpp ${PROJECT_SOURCE_DIR}/mock_server/metrics.cpp)
target_include_directories(bench_metrics PRIVATE ${PROJECT_SOURCE_DIR}/mock_server)
target_link_libraries(bench_metrics PRIVATE hf3fs_meta::state hf3fs_meta_durable prometheus-cpp::core)
