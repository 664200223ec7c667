#pragma once
// Which sanitizer this translation unit is built with, for the code that must act differently
// under one (GCC defines __SANITIZE_*__, clang answers __has_feature):
// - ATTNGRAPH_TSAN: ThreadSanitizer;
// - ATTNGRAPH_ASAN: AddressSanitizer;
// - ATTNGRAPH_SANITIZED: AddressSanitizer or ThreadSanitizer.
#if defined(__SANITIZE_THREAD__)
#define ATTNGRAPH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNGRAPH_TSAN 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define ATTNGRAPH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNGRAPH_ASAN 1
#endif
#endif

#if defined(ATTNGRAPH_ASAN) || defined(ATTNGRAPH_TSAN)
#define ATTNGRAPH_SANITIZED 1
#endif
