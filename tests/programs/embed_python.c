/*
 * embed_python N
 *
 * An application that embeds CPython (linked to libpython): the calls its
 * interpreter makes at known lines of a script given as a string get those
 * lines as their sites (file "<embedded>"), and the C code's own calls get
 * their native caller (main).
 *
 *   main: 1 open (open64: Python.h sets _FILE_OFFSET_BITS=64) + 1 close of
 *         /dev/null before the interpreter starts
 *   "<embedded>" line 3, <module>: N os.stat("/")
 *   "<embedded>" line 5, touch:    N + 1 os.stat("/") (a function)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: embed_python N\n");
        return 2;
    }
    long n = strtol(argv[1], NULL, 10);
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0 || close(fd) != 0) return 1;
    Py_Initialize();
    char script[512];
    snprintf(script, sizeof script,
             "import os\n"
             "for _ in range(%ld):\n"
             "    os.stat('/')\n"
             "def touch(k):\n"
             "    for _ in range(k): os.stat('/')\n"
             "touch(%ld)\n",
             n, n + 1);
    PyObject *code = Py_CompileString(script, "<embedded>", Py_file_input);
    if (!code) { PyErr_Print(); return 1; }
    PyObject *globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *result = PyEval_EvalCode(code, globals, globals);
    if (!result) { PyErr_Print(); return 1; }
    Py_DECREF(result);
    Py_DECREF(code);
    Py_DECREF(globals);
    return Py_FinalizeEx() == 0 ? 0 : 1;
}
