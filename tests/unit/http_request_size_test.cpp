// HttpFront's reading of a request's size (broker/http/http_front.hpp): whole
// once its head and its Content-Length's bytes are in; refused with the
// status a client should hear.
#include <gtest/gtest.h>

#include "broker/http/http_front.hpp"

using namespace dueq::broker;

TEST(HttpRequestSize, AHeadNotYetCompleteNeedsMore) {
  EXPECT_EQ(http_request_size("", 100).bytes, 0u);
  EXPECT_EQ(http_request_size("GET /healthz HTTP/1.1\r\nHost: x\r\n", 100).bytes, 0u);
  EXPECT_EQ(http_request_size("GET /healthz HTTP/1.1\r\nHost: x\r\n", 100).status, 0);
}

TEST(HttpRequestSize, AHeadWithoutABodyIsWholeAtItsEmptyLine) {
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(http_request_size(request, 100).bytes, request.size());
  EXPECT_EQ(http_request_size(request + "more", 100).bytes, request.size()) << "what follows is not part of it";
}

TEST(HttpRequestSize, ABodyIsCountedByContentLengthInAnyCase) {
  const std::string head = "POST /api/dead/replay HTTP/1.1\r\ncontent-LENGTH:  12 \r\n\r\n";
  EXPECT_EQ(http_request_size(head, 100).bytes, head.size() + 12);
}

TEST(HttpRequestSize, WhatCannotBeReadWholeIsRefusedWithItsStatus) {
  EXPECT_EQ(http_request_size("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 100).status, 413);
  EXPECT_EQ(http_request_size("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 100).status, 400);
  EXPECT_EQ(http_request_size("POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 100).status, 400);
  EXPECT_EQ(http_request_size("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 100).status, 411);
  EXPECT_EQ(http_request_size("GET / HTTP/1.1\r\nX: " + std::string(HttpFront::kMaxHeadBytes, 'a'), 100).status, 431);
  EXPECT_EQ(http_request_size("GET / HTTP/1.1\r\nX: " + std::string(HttpFront::kMaxHeadBytes, 'a') + "\r\n\r\n", 100).status, 431);
}
