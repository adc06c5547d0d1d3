// Placeholder: the tenet runtime module is being written.
#include <tvm/ffi/extra/module.h>
