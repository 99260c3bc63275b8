#include "common/audit/audit_chain.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/audit/audit_entry.hpp"
#include "common/audit/sha256.hpp"

namespace kiln::common {
namespace {

using ::testing::HasSubstr;

AuditEntry Sample(int i) {
  AuditEntry e;
  e.time_ms = 1700000000000 + i;
  e.tenant = "acme";
  e.runtime = "python";
  e.job_id = "job-" + std::to_string(i);
  e.code = "print(" + std::to_string(i) + ")";
  e.code_sha256 = Sha256Hex(e.code);
  e.input_sha256 = Sha256Hex("");
  e.output_sha256 = OutputDigest(std::to_string(i) + "\n", "", "");
  e.stdout_head = std::to_string(i) + "\n";
  e.exit_code = 0;
  e.status = "succeeded";
  e.duration_ms = 12;
  e.approval = "auto";
  e.worker = "w1";
  return e;
}

std::vector<StoredAuditEntry> Chain(int n) {
  std::vector<StoredAuditEntry> out;
  std::string prev(kAuditGenesis);
  for (int i = 0; i < n; ++i) {
    StoredAuditEntry s;
    s.id = std::to_string(i) + "-0";
    s.entry = Sample(i).Canonical();
    s.prev = prev;
    s.hash = EntryHash(prev, Sample(i));
    prev = s.hash;
    out.push_back(std::move(s));
  }
  return out;
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 split;
  split.Update("a");
  split.Update("bc");
  EXPECT_EQ(split.FinishHex(), Sha256Hex("abc"));
}

TEST(AuditChain, LinkHashIsSha256OfPrevNewlineEntry) {
  // Computed independently: python3 -c "import hashlib; print(hashlib.sha256(b'p\ne').hexdigest())"
  EXPECT_EQ(AuditLinkHash("p", "e"),
            "91f4bdefee6833a67d34ebffca2eae57be7f0d4c65b033b7ac2135bf85018f3c");
  EXPECT_EQ(EntryHash("p", Sample(1)), AuditLinkHash("p", Sample(1).Canonical()));
  EXPECT_NE(EntryHash("p", Sample(1)), EntryHash("q", Sample(1)));
}

TEST(AuditEntry, CanonicalJsonHasSortedKeysAndIsStable) {
  AuditEntry e;
  e.time_ms = 5;
  e.tenant = "t";
  e.job_id = "j";
  e.code = "x";
  e.stdout_head = "1\n";
  e.status = "succeeded";
  e.approval = "admin:ann";
  e.redactions = 2;
  e.warnings = {"w"};
  EXPECT_EQ(e.Canonical(),
            R"({"approval":"admin:ann","code":"x","code_sha256":"","duration_ms":null,)"
            R"("exit_code":null,"input_sha256":"","job_id":"j","output_sha256":"",)"
            R"("redactions":2,"runtime":"","session_id":"","status":"succeeded",)"
            R"("stdout_head":"1\n","tenant":"t","time_ms":5,"v":1,"warnings":["w"],"worker":""})");
  auto back = AuditEntry::FromJson(nlohmann::json::parse(Sample(3).Canonical()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->Canonical(), Sample(3).Canonical());
  EXPECT_EQ(back->exit_code, 0);
  EXPECT_EQ(back->duration_ms, 12);
}

TEST(AuditEntry, CodeBytesIsWrittenOnlyForExcerpts) {
  // An ordinary entry has no code_bytes key: its text is what it was before the field.
  EXPECT_FALSE(Sample(1).ToJson().contains("code_bytes"));
  AuditEntry e = Sample(2);
  e.code = "head\n[kiln: excerpt: ...]";
  e.code_bytes = 1 << 20;
  const std::string text = e.Canonical();
  EXPECT_THAT(text, HasSubstr(R"("code_bytes":1048576,"code_sha256":)"));
  auto back = AuditEntry::FromJson(nlohmann::json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->code_bytes, 1u << 20);
  EXPECT_EQ(back->Canonical(), text);
  auto plain = AuditEntry::FromJson(nlohmann::json::parse(Sample(1).Canonical()));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->code_bytes.has_value());
}

TEST(AuditEntry, FromJsonIsStrict) {
  nlohmann::json j = Sample(1).ToJson();
  j.erase("worker");
  EXPECT_THAT(AuditEntry::FromJson(j).status().message(), HasSubstr("worker: missing"));
  j = Sample(1).ToJson();
  j["exit_code"] = "0";
  EXPECT_THAT(AuditEntry::FromJson(j).status().message(), HasSubstr("exit_code: expected"));
  j = Sample(1).ToJson();
  j["v"] = 2;
  EXPECT_THAT(AuditEntry::FromJson(j).status().message(), HasSubstr("unsupported version 2"));
}

TEST(AuditEntry, InvalidUtf8IsReplacedInTextButDigestsKeepTheBytes) {
  AuditEntry e = Sample(1);
  e.code = "print('\xff\xfe')";
  e.code_sha256 = Sha256Hex(e.code);
  const std::string text = e.Canonical();
  auto parsed = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_THAT(parsed["code"].get<std::string>(), HasSubstr("\xef\xbf\xbd"));  // U+FFFD
  EXPECT_EQ(parsed["code_sha256"], Sha256Hex("print('\xff\xfe')"));
  // Re-serialising the parsed text gives the same bytes: exports verify offline.
  EXPECT_EQ(AuditEntry::CanonicalJson(parsed), text);
}

TEST(AuditEntry, Utf8HeadCountsCharactersAndNeverSplitsOne) {
  EXPECT_EQ(Utf8Head("hello", 3), "hel");
  EXPECT_EQ(Utf8Head("hi", 500), "hi");
  std::string accents;
  for (int i = 0; i < 600; ++i) accents += "\xc3\xa9";  // é
  EXPECT_EQ(Utf8Head(accents, 500).size(), 1000u);
  EXPECT_EQ(Utf8Head("a\xe2\x82\xac"
                     "b",
                     2),
            "a\xe2\x82\xac");  // a€
  EXPECT_EQ(Utf8Head("\xff\xfe"
                     "abc",
                     3),
            "\xff\xfe"
            "a");                                       // invalid bytes: one each
  EXPECT_EQ(Utf8Head("ab\xe2\x82", 10), "ab\xe2\x82");  // truncated tail kept bytewise
}

TEST(AuditEntry, OutputDigestFramesEachPart) {
  EXPECT_EQ(OutputDigest("ab", "c", ""),
            "e9d972cafa0307c3603b21013c3928b956f86f8c9eb579d1620ed266a49c64b6");
  EXPECT_NE(OutputDigest("ab", "c", ""), OutputDigest("a", "bc", ""));
  EXPECT_NE(OutputDigest("", "", "1"), OutputDigest("1", "", ""));
}

TEST(AuditChain, IntactChainVerifies) {
  auto chain = Chain(10);
  EXPECT_EQ(VerifyChain(chain), std::nullopt);
  AuditChainVerifier v;
  for (const auto& e : chain) ASSERT_TRUE(v.Add(e));
  EXPECT_EQ(v.checked(), 10u);
  EXPECT_EQ(v.expected_prev(), chain.back().hash);
  EXPECT_EQ(VerifyChain({}), std::nullopt);
}

TEST(AuditChain, AnEditedEntryFailsAtItsOwnIndex) {
  for (size_t k = 0; k < 10; ++k) {
    auto chain = Chain(10);
    const size_t at = chain[k].entry.find("succeeded");
    ASSERT_NE(at, std::string::npos);
    chain[k].entry.replace(at, 9, "failed");
    auto b = VerifyChain(chain);
    ASSERT_TRUE(b.has_value()) << k;
    EXPECT_EQ(b->index, k);
    EXPECT_EQ(b->id, chain[k].id);
    EXPECT_THAT(b->reason, HasSubstr("hash does not match"));
  }
  // Rewriting an entry's hash too moves the break to the next link.
  auto chain = Chain(10);
  chain[3].entry = Sample(99).Canonical();
  chain[3].hash = AuditLinkHash(chain[3].prev, chain[3].entry);
  auto b = VerifyChain(chain);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 4u);
  EXPECT_THAT(b->reason, HasSubstr("prev does not match"));
}

TEST(AuditChain, ADeletedOrMovedEntryFailsWhereItWas) {
  for (size_t k = 0; k < 9; ++k) {  // deleting the last leaves a valid (shorter) chain
    auto chain = Chain(10);
    chain.erase(chain.begin() + static_cast<long>(k));
    auto b = VerifyChain(chain);
    ASSERT_TRUE(b.has_value()) << k;
    EXPECT_EQ(b->index, k);
    EXPECT_THAT(b->reason, HasSubstr(k == 0 ? "anchor" : "entry before it"));
  }
  auto chain = Chain(10);
  std::swap(chain[3], chain[4]);
  auto b = VerifyChain(chain);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 3u);
}

TEST(AuditChain, ATrimmedChainVerifiesFromItsAnchor) {
  auto chain = Chain(10);
  const std::string anchor = chain[4].prev;
  chain.erase(chain.begin(), chain.begin() + 4);
  EXPECT_EQ(VerifyChain(chain, anchor), std::nullopt);
  auto b = VerifyChain(chain);  // genesis anchor: entries are missing at the front
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 0u);
}

TEST(AuditChain, ExportLinesRoundTripAndVerify) {
  auto chain = Chain(5);
  chain[2].entry = "not json {";  // a damaged entry is exported as a string, unchanged
  std::vector<StoredAuditEntry> back;
  for (const auto& e : chain) {
    const std::string line = e.ToExportJson().dump();
    auto parsed = StoredAuditEntry::FromExportJson(nlohmann::json::parse(line));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->entry, e.entry);
    EXPECT_EQ(parsed->id, e.id);
    EXPECT_EQ(parsed->prev, e.prev);
    EXPECT_EQ(parsed->hash, e.hash);
    back.push_back(std::move(parsed).value());
  }
  EXPECT_TRUE(chain[0].ToExportJson()["entry"].is_object());
  auto b = VerifyChain(back);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->index, 2u);
  EXPECT_THAT(StoredAuditEntry::FromExportJson(nlohmann::json::object()).status().message(),
              HasSubstr("id: expected a string"));
}

}  // namespace
}  // namespace kiln::common
