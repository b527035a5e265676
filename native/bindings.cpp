// Python bindings for the packing dispatcher: only PYBIND11_MODULE lives here.
#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
    m.doc() = "telesum native packing dispatcher";
}
