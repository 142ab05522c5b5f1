/* llama-ffi generator: the C types cffi already knows. Declarations from this folder are dropped. */
#pragma once
typedef _Bool bool;
#define true 1
#define false 0
