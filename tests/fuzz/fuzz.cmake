# Fuzzing (tests/fuzz/README.md): libFuzzer harnesses, built with clang
# whatever the project's compiler is, only where clang is installed, and only
# in the normal build (each harness carries its own ASan + UBSan). Each
# harness is one clang invocation over its sources (no objects shared with
# the gcc build). ctest runs each for a few seconds on a scratch copy of its
# seed corpus (label "fuzz"); `make fuzz` runs them long (tests/fuzz/run).
find_program(CUBICLE_CLANG NAMES clang clang-16 clang-15 clang-14)
if(NOT CUBICLE_CLANG OR CUBICLE_SANITIZE)
	return()
endif()

set(FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(FUZZ_SECONDS_CI 3 CACHE STRING "seconds each fuzz harness runs under ctest")
# One seed for every CI run: the smoke replays the same inputs each time, so a
# red CI names a crash anyone can replay, and new ground is `make fuzz`'s
# (random seeds, long runs).
set(FUZZ_SEED_CI 1 CACHE STRING "libFuzzer seed of the ctest smoke runs")
set(FUZZ_FLAGS -g -O1 -std=c11 -D_GNU_SOURCE -DCUBICLE_VERSION="fuzz"
	-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
	-Wall -Wno-unused-parameter -Wno-unused-function)
# Every header of the tree: a harness is rebuilt when any of them changes.
file(GLOB_RECURSE FUZZ_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/wire/*.h
	${CMAKE_SOURCE_DIR}/host/*.h ${CMAKE_SOURCE_DIR}/envd/*.h ${FUZZ_DIR}/*.h)
set(FUZZ_INC -I${CMAKE_SOURCE_DIR}/wire -I${CMAKE_SOURCE_DIR}/host/api
	-I${CMAKE_SOURCE_DIR}/host/core -I${CMAKE_SOURCE_DIR}/host/store
	-I${CMAKE_SOURCE_DIR}/host/drivers -I${CMAKE_SOURCE_DIR}/host/runner
	-I${CMAKE_SOURCE_DIR}/host/cluster
	-I${CMAKE_SOURCE_DIR}/envd -I${CMAKE_SOURCE_DIR}/envd/x11 -I${CMAKE_SOURCE_DIR}/envd/proc
	-I${CMAKE_SOURCE_DIR}/envd/session -I${CMAKE_SOURCE_DIR}/envd/vnc
	-I${CMAKE_SOURCE_DIR}/envd/guest
	-I${CMAKE_BINARY_DIR}/envd -I${CMAKE_BINARY_DIR}/host -I${FUZZ_DIR})
set(WIRE_SRC err.c params.c base64.c token.c ident.c utf8.c clock.c metrics.c log.c)
list(TRANSFORM WIRE_SRC PREPEND ${CMAKE_SOURCE_DIR}/wire/)
set(FUZZ_HARNESSES "")

# cubicle_fuzzer(NAME SOURCES... [LIBS pkg-config modules...] [DEPENDS targets...]
#                [INCLUDED files the harness #includes] [FLAGS more clang flags])
function(cubicle_fuzzer name)
	cmake_parse_arguments(F "" "" "SOURCES;LIBS;DEPENDS;INCLUDED;FLAGS" ${ARGN})
	set(out ${CMAKE_BINARY_DIR}/tests/fuzz_${name})
	set(libs "")
	foreach(m ${F_LIBS})
		string(TOUPPER ${m} v)
		string(REGEX REPLACE "[^A-Z0-9]" "_" v ${v})
		pkg_check_modules(FUZZPC_${v} REQUIRED ${m})
		list(APPEND libs ${FUZZPC_${v}_CFLAGS} ${FUZZPC_${v}_LDFLAGS})
	endforeach()
	add_custom_command(OUTPUT ${out}
		COMMAND ${CUBICLE_CLANG} ${FUZZ_FLAGS} ${FUZZ_INC} ${FUZZ_DIR}/fuzz_${name}.c
			${F_SOURCES} ${libs} ${F_FLAGS} -lpthread -lm -o ${out}
		DEPENDS ${FUZZ_DIR}/fuzz_${name}.c ${F_SOURCES} ${F_INCLUDED} ${FUZZ_HEADERS} ${F_DEPENDS}
		COMMENT "libFuzzer harness fuzz_${name} (clang)" VERBATIM)
	add_custom_target(fuzz_${name} ALL DEPENDS ${out})
	if(F_DEPENDS)
		add_dependencies(fuzz_${name} ${F_DEPENDS})
	endif()
	# A few seconds on a scratch copy of the seeds (new inputs are dropped);
	# a crash fails the test and leaves its input in the test's directory.
	add_test(NAME fuzz.${name} COMMAND sh -c
		"d=$(mktemp -d) && trap 'rm -rf \"$d\"' EXIT && \"$0\" -seed=${FUZZ_SEED_CI} -max_total_time=${FUZZ_SECONDS_CI} -timeout=10 -rss_limit_mb=1536 -print_final_stats=1 \"$d\" \"$1\""
		${out} ${FUZZ_DIR}/corpus/${name})
	set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 120
		ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1")
	set(FUZZ_HARNESSES ${FUZZ_HARNESSES} ${name} PARENT_SCOPE)
endfunction()

set(API ${CMAKE_SOURCE_DIR}/host/api)
set(ENVD ${CMAKE_SOURCE_DIR}/envd)

cubicle_fuzzer(rfbfilter SOURCES ${API}/rfbfilter.c)
cubicle_fuzzer(token SOURCES ${WIRE_SRC} LIBS jansson libcrypto)
cubicle_fuzzer(nodeauth SOURCES ${WIRE_SRC} ${CMAKE_SOURCE_DIR}/host/cluster/nodeauth.c
	LIBS jansson libcrypto)
cubicle_fuzzer(codec SOURCES ${WIRE_SRC} LIBS jansson libcrypto)
cubicle_fuzzer(params SOURCES ${WIRE_SRC} LIBS jansson libcrypto)
cubicle_fuzzer(keys SOURCES ${WIRE_SRC} ${ENVD}/x11/keys.c LIBS jansson libcrypto x11
	DEPENDS desk)
cubicle_fuzzer(desktop_entry SOURCES ${WIRE_SRC} ${ENVD}/proc/userenv.c
	INCLUDED ${ENVD}/proc/launch.c LIBS jansson libcrypto)
cubicle_fuzzer(envd_reply SOURCES ${WIRE_SRC} INCLUDED ${CMAKE_SOURCE_DIR}/wire/httpc.c
	LIBS jansson libcrypto libcurl)
# envd's actions with the X and process layers faked (in the harness).
file(GLOB ACTIONS_SRC CONFIGURE_DEPENDS ${ENVD}/actions/*.c)
cubicle_fuzzer(envd_actions SOURCES ${WIRE_SRC} ${ENVD}/action.c ${ACTIONS_SRC}
	${ENVD}/guest/pkg-policy.c ${CMAKE_BINARY_DIR}/envd/actions-gen.c LIBS jansson libcrypto glib-2.0 atspi-2 DEPENDS envd)

# The package helper's command lines and the size files' texts (envd/guest/).
cubicle_fuzzer(pkg SOURCES ${WIRE_SRC} ${ENVD}/guest/pkg-policy.c ${ENVD}/guest/procview-text.c
	LIBS jansson libcrypto)

file(GLOB STORE_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/host/store/*.c)
cubicle_fuzzer(runner SOURCES ${WIRE_SRC} ${CMAKE_SOURCE_DIR}/host/runner/runner.c ${STORE_SRC}
	LIBS jansson libcrypto sqlite3 libpq)

# cubicled's API in process (apihost.h): the real router, handlers, MCP,
# computer-use and stream code, the real store, the fake core (fakecore.c).
set(API_HOST_SRC ${FUZZ_DIR}/fakecore.c ${API}/handlers.c ${API}/handlers-templates.c
	${API}/wait.c ${API}/routes.c ${API}/metrics.c
	${API}/mcp.c ${API}/mcp-tools.c ${API}/computeruse.c
	${API}/computeruse-anthropic.c ${API}/computeruse-openai.c ${API}/computeruse-envd.c
	${API}/stream.c ${API}/recordings.c ${API}/rfbfilter.c ${API}/preview.c ${STORE_SRC}
	${CMAKE_SOURCE_DIR}/host/drivers/guest-net.c ${CMAKE_SOURCE_DIR}/host/cluster/nodeauth.c ${WIRE_SRC} ${CMAKE_SOURCE_DIR}/wire/httpd.c
	${CMAKE_SOURCE_DIR}/wire/httpd-tunnel.c ${CMAKE_SOURCE_DIR}/wire/httpd-relay.c
	${CMAKE_SOURCE_DIR}/wire/httpreq.c)
# api.c is included by apihost.h (its router and handlers are static). Their
# sleeps (computer-use waits) are pretend: fakecore.c's __wrap_clock_sleep_ms.
foreach(h api mcp computeruse)
	cubicle_fuzzer(${h} SOURCES ${API_HOST_SRC} INCLUDED ${API}/api.c
		LIBS jansson libcrypto sqlite3 libpq libwebsockets DEPENDS cubicled
		FLAGS -Wl,--wrap=clock_sleep_ms)
endforeach()

# The link of a machine you bring (wire/mux.c), from either side.
cubicle_fuzzer(mux SOURCES ${WIRE_SRC} ${CMAKE_SOURCE_DIR}/wire/mux.c LIBS jansson libcrypto)

# The preview listener: request heads and streams (wire/httpreq.c) and the
# relay router (host/api/preview.c), with the fake core.
cubicle_fuzzer(httpreq SOURCES ${FUZZ_DIR}/fakecore.c ${API}/preview.c ${WIRE_SRC}
	${CMAKE_SOURCE_DIR}/wire/httpreq.c ${CMAKE_SOURCE_DIR}/wire/httpd.c
	${CMAKE_SOURCE_DIR}/wire/httpd-tunnel.c ${CMAKE_SOURCE_DIR}/wire/httpd-relay.c
	LIBS jansson libcrypto libwebsockets DEPENDS cubicled)

# A template's recipe (host/core/template-recipe.c) on any bytes.
cubicle_fuzzer(recipe SOURCES ${WIRE_SRC} ${CMAKE_SOURCE_DIR}/host/core/template-recipe.c
	LIBS jansson libcrypto)

# `make fuzz` (tests/fuzz/run) reads the list of harnesses from here.
file(WRITE ${CMAKE_BINARY_DIR}/tests/fuzz-harnesses.txt "")
foreach(h ${FUZZ_HARNESSES})
	file(APPEND ${CMAKE_BINARY_DIR}/tests/fuzz-harnesses.txt "${h}\n")
endforeach()
