/* llama-ffi generator: the C types cffi already knows. Declarations from this folder are dropped. */
#pragma once
typedef struct __va_list_tag *va_list;
