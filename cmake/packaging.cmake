# The Debian package: `cmake --build build --target package` writes
# build/spoolfs_<version>_<arch>.deb with CPack (no debian/ directory to keep in step).
#
# Depends: dpkg-shlibdeps computes the shared libraries' packages from the binary. What it
# cannot see is added by hand:
# - fuse3: fusermount3 (mounts as a user, unmounts) and mount.fuse3 (fstab, mount -t);
# - libcurl4 (>= 7.85.0): CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR, the
#   newest options fetch/http/ sets (shlibdeps only knows the soname's oldest version);
# - libfuse3-3 (>= 3.14): fuse_session_custom_io and fuse_loop_cfg_*, the newest
#   functions fs/ calls (FUSE_USE_VERSION 312 and up).
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "spoolfs")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "spoolfs developers <maintainers@spoolfs.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "read-only FUSE filesystem for object stores")
set(CPACK_PACKAGE_DESCRIPTION
    "spoolfs mounts an S3-compatible bucket, or HTTP(S) objects listed by a JSON\n\
manifest, as a read-only directory tree. Objects are fetched once however many\n\
processes read them, verified against their sha256, and can be kept in a cache\n\
directory shared by the mounts of a machine.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3, libcurl4 (>= 7.85.0), libfuse3-3 (>= 3.14)")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://spoolfs.invalid/")
# /usr, not the /usr/local a plain `cmake --install` uses: packages own /usr.
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
# The package's control scripts: reload systemd so it sees (or forgets) spoolfs@.service.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${CMAKE_CURRENT_SOURCE_DIR}/packaging/postinst;${CMAKE_CURRENT_SOURCE_DIR}/packaging/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# What Debian policy asks of every package (and harmless in a plain install): a copyright
# file and a gzip'd changelog in the doc directory, the man page gzip'd.
set(SPOOLFS_PKG_DOC "${CMAKE_CURRENT_BINARY_DIR}/pkgdoc")
file(MAKE_DIRECTORY "${SPOOLFS_PKG_DOC}")
string(TIMESTAMP SPOOLFS_PKG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(packaging/changelog.in "${SPOOLFS_PKG_DOC}/changelog" @ONLY)
find_program(GZIP gzip REQUIRED)
add_custom_command(
  OUTPUT "${SPOOLFS_PKG_DOC}/changelog.gz" "${SPOOLFS_PKG_DOC}/spoolfs.1.gz"
         "${SPOOLFS_PKG_DOC}/mount.spoolfs.8.gz"
  COMMAND ${GZIP} -9nc "${SPOOLFS_PKG_DOC}/changelog" > "${SPOOLFS_PKG_DOC}/changelog.gz"
  COMMAND ${GZIP} -9nc "${CMAKE_CURRENT_SOURCE_DIR}/doc/spoolfs.1" > "${SPOOLFS_PKG_DOC}/spoolfs.1.gz"
  COMMAND ${GZIP} -9nc "${CMAKE_CURRENT_SOURCE_DIR}/doc/mount.spoolfs.8" > "${SPOOLFS_PKG_DOC}/mount.spoolfs.8.gz"
  DEPENDS "${SPOOLFS_PKG_DOC}/changelog" "${CMAKE_CURRENT_SOURCE_DIR}/doc/spoolfs.1"
          "${CMAKE_CURRENT_SOURCE_DIR}/doc/mount.spoolfs.8")
add_custom_target(pkgdoc ALL DEPENDS "${SPOOLFS_PKG_DOC}/changelog.gz"
                  "${SPOOLFS_PKG_DOC}/spoolfs.1.gz" "${SPOOLFS_PKG_DOC}/mount.spoolfs.8.gz")
install(FILES packaging/copyright "${SPOOLFS_PKG_DOC}/changelog.gz" README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES "${SPOOLFS_PKG_DOC}/spoolfs.1.gz" DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES "${SPOOLFS_PKG_DOC}/mount.spoolfs.8.gz" DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)

include(CPack)
