# Installs headers, libraries, programs and a CMake package: find_package(hf3fs_meta CONFIG).
include(CMakePackageConfigHelpers)

install(TARGETS hf3fs_meta_state hf3fs_meta_protocol hf3fs_meta_client hf3fs_meta_service
  EXPORT hf3fs_meta_targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/hf3fs_meta DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(HF3FS_META_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hf3fs_meta)
install(EXPORT hf3fs_meta_targets NAMESPACE hf3fs_meta:: DESTINATION ${HF3FS_META_CMAKE_DIR}
  FILE hf3fs_meta-targets.cmake)
configure_package_config_file(cmake/hf3fs_meta-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/hf3fs_meta-config.cmake INSTALL_DESTINATION ${HF3FS_META_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hf3fs_meta-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hf3fs_meta-config.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/hf3fs_meta-config-version.cmake DESTINATION ${HF3FS_META_CMAKE_DIR})
