// The S3 response scanner on documents shaped like S3's (and moto's) answers.
#include <gtest/gtest.h>

#include "store/s3_client.h"
#include "store/s3_xml.h"

namespace moerl::store {
namespace {

TEST(store_s3_xml, list_response_keys_and_continuation_are_extracted_and_decoded) {
  const std::string doc =
      R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
      R"(<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>)"
      R"(<NextContinuationToken>1/abc+=</NextContinuationToken>)"
      R"(<Contents><Key>p/a &amp; b</Key><Size>1</Size></Contents>)"
      R"(<Contents><Key>p/&#233;t&#xE9;&lt;&gt;</Key><Size>2</Size></Contents></ListBucketResult>)";
  EXPECT_EQ(xml_all(doc, "Key"), (std::vector<std::string>{"p/a & b", "p/\xc3\xa9t\xc3\xa9<>"}));
  EXPECT_EQ(xml_first(doc, "IsTruncated").value(), "true");
  EXPECT_EQ(xml_first(doc, "NextContinuationToken").value(), "1/abc+=");
  EXPECT_FALSE(xml_first(doc, "UploadId").has_value());
}

TEST(store_s3_xml, error_code_and_message_are_found) {
  const std::string doc =
      "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated "
      "does not match</Message><RequestId>1</RequestId></Error>";
  EXPECT_EQ(xml_first(doc, "Code").value(), "SignatureDoesNotMatch");
  EXPECT_EQ(xml_first(doc, "Message").value(),
            "The request signature we calculated does not match");
}

TEST(store_s3_xml, malformed_input_does_not_crash_and_keeps_unknown_entities) {
  EXPECT_FALSE(xml_first("<Key>unterminated", "Key").has_value());
  EXPECT_EQ(xml_decode("a &bogus; &#xZZ; & b"), "a &bogus; &#xZZ; & b");
  EXPECT_EQ(xml_decode(xml_encode("\"<&'>\"")), "\"<&'>\"");
}

TEST(store_s3_encode, unreserved_characters_stay_and_everything_else_is_percent_encoded) {
  EXPECT_EQ(s3_encode("a/b c+d=e~f_g.h-i", true), "a/b%20c%2Bd%3De~f_g.h-i");
  EXPECT_EQ(s3_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(s3_encode("\xc3\xa9", true), "%C3%A9");
}

}  // namespace
}  // namespace moerl::store
