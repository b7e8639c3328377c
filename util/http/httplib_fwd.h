// cpp-httplib's request and response, declared for headers that only take them by reference
// (the handlers' signatures), so that they need not include all of httplib.h.
#pragma once

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib
