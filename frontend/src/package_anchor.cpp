// libkiln.so (the installed package, frontend/CMakeLists.txt) is made of
// Kiln's archives linked whole; CMake needs one source file of its own.
namespace kiln { int package_anchor = 0; }
