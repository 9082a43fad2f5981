/* A stand-in "server" for the fail-closed tests (tests/test_boundary.py).
 *
 * It provides only part of the Triton C API (exported with -rdynamic, so the
 * backend finds these symbols in the process, as it finds tritonserver's),
 * loads the backend library and calls its entry points the way the server
 * would. A backend that fails open returns NULL (success) without the API it
 * needs; a correct one returns an error naming the missing symbol.
 *
 * Built twice: as is (error API present, the rest of the API missing), and
 * with -DNO_ERROR_API (not even a way to make an error object).
 *
 * usage: host LIBRARY ENTRY     ENTRY: init | model | execute
 * prints "SUCCESS" (exit 1) or "ERROR <code>: <message>" (exit 0).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int code;
  char* message;
} Error;

#ifndef NO_ERROR_API
Error* TRITONSERVER_ErrorNew(int code, const char* message) {
  Error* e = malloc(sizeof *e);
  e->code = code;
  e->message = strdup(message ? message : "");
  return e;
}
int TRITONSERVER_ErrorCode(Error* e) { return e->code; }
const char* TRITONSERVER_ErrorMessage(Error* e) { return e->message; }
void TRITONSERVER_ErrorDelete(Error* e) {
  free(e->message);
  free(e);
}
#endif

/* Present, so the missing symbol is one further down the backend's list. */
Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = 1;
  *minor = 19;
  return NULL;
}

typedef Error* (*Entry1)(void*);
typedef Error* (*Execute)(void*, void**, uint32_t);

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBRARY init|model|execute\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  void* fake = (void*)0x10; /* never dereferenced by a fail-closed backend */
  void* requests[1] = {(void*)0x20};
  Error* e = NULL;
  if (strcmp(argv[2], "init") == 0) {
    e = ((Entry1)dlsym(lib, "TRITONBACKEND_Initialize"))(fake);
  } else if (strcmp(argv[2], "model") == 0) {
    e = ((Entry1)dlsym(lib, "TRITONBACKEND_ModelInitialize"))(fake);
  } else if (strcmp(argv[2], "execute") == 0) {
    e = ((Execute)dlsym(lib, "TRITONBACKEND_ModelInstanceExecute"))(fake, requests, 1);
  } else {
    fprintf(stderr, "unknown entry %s\n", argv[2]);
    return 2;
  }
  if (e == NULL) {
    printf("SUCCESS\n");
    return 1;
  }
  printf("ERROR %d: %s\n", e->code, e->message);
  return 0;
}
