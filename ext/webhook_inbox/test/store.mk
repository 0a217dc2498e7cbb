# store.mk - unit tests of the store core (store.c) and of conninfo redaction, plain and
# under ASan/UBSan. Kept apart from the verification core's Makefile (another module).
#   make -f store.mk test    make -f store.mk asan
CC ?= cc
SAN_CC ?= $(shell command -v clang-14 >/dev/null 2>&1 && echo clang-14 || echo gcc)
PG_INC := $(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
WARN = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter -I$(PG_INC)
CORE = ../store.c ../redact.c ../ordering.c ../json.c ../json_skip.c ../num.c
HDRS = $(wildcard ../*.h) check.h
LIBS = -lpq -lm -pthread
OUT ?= build

all: test asan

$(OUT):
	mkdir -p $(OUT)

$(OUT)/test_store: test_store.c $(CORE) $(HDRS) | $(OUT)
	$(CC) $(WARN) -O2 -g -o $@ test_store.c $(CORE) $(LIBS)

$(OUT)/test_store_asan: test_store.c $(CORE) $(HDRS) | $(OUT)
	$(SAN_CC) $(WARN) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		-fno-sanitize-recover=all -o $@ test_store.c $(CORE) $(LIBS)

test: $(OUT)/test_store
	./$(OUT)/test_store

asan: $(OUT)/test_store_asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(OUT)/test_store_asan

.PHONY: all test asan
