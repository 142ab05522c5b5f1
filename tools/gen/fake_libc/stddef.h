/* llama-ffi generator: the C types cffi already knows. Declarations from this folder are dropped. */
#pragma once
typedef unsigned long size_t; typedef long ptrdiff_t; typedef int wchar_t;
#define NULL ((void*)0)
