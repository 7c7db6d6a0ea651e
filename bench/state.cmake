hf3fs_meta_add_bench(bench_state ${CMAKE_CURRENT_LIST_DIR}/bench_state.cpp)
target_link_libraries(bench_state PRIVATE hf3fs_meta::state)
