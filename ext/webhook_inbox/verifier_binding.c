/* verifier_binding.c - Ruby binding (in progress). */
#include "bindings.h"

void wi_verifier_binding_init(VALUE mod)
{
    (void)mod;
}
