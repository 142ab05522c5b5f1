/* llama-ffi generator: the C types cffi already knows. Declarations from this folder are dropped. */
#pragma once
#include <stddef.h>
typedef struct _IO_FILE FILE;
